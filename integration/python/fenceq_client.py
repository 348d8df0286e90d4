#!/usr/bin/env python3
"""A fenceq HTTP API client in the Python standard library alone, and the
end-to-end check integration/api_python_test.go runs against a real workerd.

Copy the Client class into a producer: it enqueues one job or a batch,
reads a job, waits for it, cancels and retries it. Each refusal raises
APIError with the status, code, field and message the API answered.

Run as a script, it enqueues COUNT jobs of kind "add" (half one by one,
half in batches), sends some of them again and checks that the same jobs
answer, waits for every job and checks its result, then checks a few
refusals. It prints one JSON line of figures and exits 0, or 1 with what
went wrong.

    FENCEQ_URL=http://127.0.0.1:9090 FENCEQ_API_TOKEN=... \\
        python3 fenceq_client.py --queue py --count 1000
"""

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request


class APIError(Exception):
    """A refusal of the API: its HTTP status and its error body."""

    def __init__(self, status, body):
        err = body.get("error", {}) if isinstance(body, dict) else {}
        self.status = status
        self.code = err.get("code", "")
        self.field = err.get("field", "")
        self.message = err.get("message", str(body))
        self.holder_id = err.get("holder_id", "")
        self.body = body
        super().__init__(f"{status} {self.code} {self.field}: {self.message}")


class Client:
    """A client of one workerd's API (base_url is http(s)://host:port)."""

    def __init__(self, base_url, token, timeout=75.0):
        self.base = base_url.rstrip("/") + "/v1"
        self.token = token
        self.timeout = timeout

    def _call(self, method, path, body=None, ok=(200, 201)):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method)
        req.add_header("Authorization", "Bearer " + self.token)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                status, raw = resp.status, resp.read()
        except urllib.error.HTTPError as e:
            status, raw = e.code, e.read()
        try:
            out = json.loads(raw) if raw else {}
        except ValueError:
            out = {"error": {"message": raw.decode(errors="replace")}}
        if status not in ok:
            raise APIError(status, out)
        return status, out

    @staticmethod
    def _q(s):
        return urllib.parse.quote(s, safe="")

    def enqueue(self, queue, job):
        """Enqueue one job (a dict in the job's JSON form). Answers
        (created, answer): created is False when a job with its id was
        there already, which is how a re-sent request is answered."""
        status, out = self._call("POST", f"/queues/{self._q(queue)}/jobs", job)
        return status == 201, out

    def enqueue_batch(self, queue, jobs):
        """Enqueue a batch; answers its items, one per job in order. A
        batch Redis failed for raises APIError (503) whose body holds the
        items: send the failed ones again with their ids."""
        _, out = self._call("POST", f"/queues/{self._q(queue)}/jobs/batch", {"jobs": jobs})
        return out["jobs"]

    def job(self, queue, job_id):
        return self._call("GET", f"/queues/{self._q(queue)}/jobs/{self._q(job_id)}")[1]

    def wait(self, queue, job_id, timeout="30s", deadline=None):
        """Wait until the job is final, waiting again after each timeout
        while deadline (seconds from now) allows. Answers the job."""
        end = None if deadline is None else time.monotonic() + deadline
        while True:
            path = f"/queues/{self._q(queue)}/jobs/{self._q(job_id)}/wait?timeout={timeout}"
            j = self._call("GET", path)[1]
            if j["final"] or (end is not None and time.monotonic() > end):
                return j

    def cancel(self, queue, job_id):
        return self._call("POST", f"/queues/{self._q(queue)}/jobs/{self._q(job_id)}/cancel")[1]

    def retry(self, queue, job_id):
        return self._call("POST", f"/queues/{self._q(queue)}/jobs/{self._q(job_id)}/retry")[1]


def expect(cond, what):
    if not cond:
        raise AssertionError(what)


def refused(fn, status, code, field):
    try:
        fn()
    except APIError as e:
        expect(e.status == status and e.code == code and e.field == field and len(e.message) > 20,
               f"refusal {e} (body {e.body}); want {status} {code} {field}")
        return e
    raise AssertionError(f"not refused; want {status} {code} {field}")


def check(c, queue, count, batch):
    figures = {}
    half = count // 2
    jobs = {}  # id -> (a, b)

    t0 = time.monotonic()
    for i in range(half):
        jid = f"s-{i}"
        jobs[jid] = (i, 2 * i)
        created, out = c.enqueue(queue, {"id": jid, "kind": "add", "payload": {"a": i, "b": 2 * i},
                                         "metadata": {"client": "python"}})
        expect(created and out["id"] == jid, f"enqueue {jid}: {out}")
    figures["single_per_s"] = round(half / (time.monotonic() - t0))

    t0 = time.monotonic()
    rest = [f"b-{i}" for i in range(count - half)]
    for k in range(0, len(rest), batch):
        part = []
        for jid in rest[k:k + batch]:
            n = int(jid[2:])
            jobs[jid] = (n, 3)
            part.append({"id": jid, "kind": "add", "payload": {"a": n, "b": 3}, "priority": 5})
        items = c.enqueue_batch(queue, part)
        expect(len(items) == len(part), f"batch answered {len(items)} items for {len(part)} jobs")
        for item, job in zip(items, part):
            expect(item["status"] == 201 and item["created"] and item["id"] == job["id"], f"batch item {item}")
    figures["batched_per_s"] = round((count - half) / (time.monotonic() - t0))

    # Sent again (as after a lost answer): the same jobs, nothing more.
    created, out = c.enqueue(queue, {"id": "s-0", "kind": "add", "payload": {"a": 0, "b": 0}})
    expect(not created and out["id"] == "s-0" and out["state"], f"re-sent single: {out}")
    again = c.enqueue_batch(queue, [{"id": jid, "kind": "add", "payload": {"a": 0, "b": 3}} for jid in rest[:batch]])
    expect(all(it["status"] == 200 and not it["created"] and it["id"] == jid for it, jid in zip(again, rest)),
           f"re-sent batch: {again[:3]}")

    t0 = time.monotonic()
    for jid, (a, b) in jobs.items():
        j = c.wait(queue, jid, deadline=120)
        expect(j["state"] == "done" and j["final"], f"job {jid} is {j['state']}: {j}")
        expect(j["result"] == {"sum": a + b, "id": jid}, f"job {jid}: result {j.get('result')}, want sum {a + b}")
        expect(j["attempt"] >= 1 and j["generation"] >= 1, f"job {jid}: attempt {j['attempt']}")
    figures["waited_per_s"] = round(count / (time.monotonic() - t0))
    j = c.job(queue, "s-1")
    expect(j["metadata"].get("client") == "python" and j["payload"] == {"a": 1, "b": 2}, f"s-1 read back: {j}")
    expect(c.job(queue, "b-0")["priority"] == 5, "b-0 lost its priority")

    # Cancel and retry through the API.
    c.enqueue(queue, {"id": "later", "kind": "add", "payload": {"a": 1, "b": 1}, "delay": "1h"})
    expect(c.cancel(queue, "later")["job"]["state"] == "cancelled", "cancel of a scheduled job")
    r = c.retry(queue, "later")
    # A worker may claim it before the answer reads it back.
    expect(r["previous_state"] == "cancelled" and r["job"]["state"] in ("pending", "running", "done"), f"retry: {r}")
    expect(c.wait(queue, "later", deadline=60)["result"]["sum"] == 2, "the retried job did not run")

    # Refusals, each with its status, code and field.
    refused(lambda: c.job(queue, "no-such-job"), 404, "not_found", "id")
    refused(lambda: c.enqueue(queue, {"kind": "add", "priority": 1000}), 400, "invalid", "priority")
    refused(lambda: c.enqueue(queue, {"kind": "add", "colour": "red"}), 400, "invalid", "colour")
    c.enqueue(queue, {"id": "u1", "kind": "add", "payload": {"a": 0, "b": 0}, "unique_key": "k", "unique_for": "1h"})
    e = refused(lambda: c.enqueue(queue, {"kind": "add", "unique_key": "k"}), 409, "unique_held", "unique_key")
    expect(e.holder_id == "u1", f"409 names {e.holder_id}, want u1")
    refused(lambda: Client(c.base[:-3], "x" * 32).job(queue, "s-0"), 401, "unauthorized", "Authorization")
    refused(lambda: c.wait(queue, "s-0", timeout="1h"), 400, "invalid", "timeout")
    return figures


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--queue", default="py")
    p.add_argument("--count", type=int, default=1000)
    p.add_argument("--batch", type=int, default=100)
    args = p.parse_args()
    c = Client(os.environ["FENCEQ_URL"], os.environ["FENCEQ_API_TOKEN"])
    try:
        figures = check(c, args.queue, args.count, args.batch)
    except (AssertionError, APIError, OSError) as e:
        print(f"FAIL: {e}", file=sys.stderr)
        return 1
    print(json.dumps(dict(figures, ok=True, jobs=args.count)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
