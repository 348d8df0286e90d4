// Select all: a checkbox with data-select-all="FORM" ticks or clears
// every row checkbox (name="id") of that form, and shows whether all,
// some or none are ticked. Without this script the rows are ticked one by
// one; the form works the same.
(function () {
  "use strict";
  var boxes = document.querySelectorAll("input[data-select-all]");
  for (var i = 0; i < boxes.length; i++) {
    (function (all) {
      var form = document.getElementById(all.getAttribute("data-select-all"));
      if (!form) {
        return;
      }
      function rows() {
        return form.querySelectorAll('input[type="checkbox"][name="id"]');
      }
      all.addEventListener("change", function () {
        var r = rows();
        for (var j = 0; j < r.length; j++) {
          r[j].checked = all.checked;
        }
        all.indeterminate = false;
      });
      form.addEventListener("change", function (ev) {
        if (ev.target === all) {
          return;
        }
        var r = rows(), on = 0;
        for (var j = 0; j < r.length; j++) {
          if (r[j].checked) {
            on++;
          }
        }
        all.checked = on === r.length && on > 0;
        all.indeterminate = on > 0 && on < r.length;
      });
    })(boxes[i]);
  }
})();
