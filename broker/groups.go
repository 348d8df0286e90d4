package broker

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

const (
	// GroupsLimitDefault and GroupsLimitMax bound GroupsQuery.Limit.
	GroupsLimitDefault, GroupsLimitMax = 50, 500
	// GroupsScanCap bounds the group entries one Groups call reads: past
	// it the page says GroupsPage.Truncated. So a listing costs at most
	// GroupsScanCap/GroupsScanStep script calls, whatever the queue holds.
	GroupsScanCap = 100_000
	// GroupsScanStep is how many group entries one script call of Groups
	// reads at most (for grunning, the COUNT of one HSCAN step, which
	// Redis treats as a hint of about that many).
	GroupsScanStep = 1000
)

// GroupsQuery selects what Inspector.Groups lists.
type GroupsQuery struct {
	// Name, when set, answers just that group, in one script call
	// whatever the queue holds. It must pass ValidateGroup.
	Name string
	// Limit is how many groups a page holds. Default GroupsLimitDefault,
	// at most GroupsLimitMax.
	Limit int
}

// GroupsPage is what Inspector.Groups answers.
type GroupsPage struct {
	// Groups are the groups with the largest ready backlogs first, ties by
	// name, up to GroupsQuery.Limit of them.
	Groups []GroupInfo
	// Scanned is how many distinct groups the listing found (with
	// GroupsQuery.Name: 0 or 1).
	Scanned int
	// Truncated: the listing read GroupsScanCap group entries and stopped,
	// so groups past them are not among Scanned (and a larger backlog may
	// be missing from Groups). Name a group to read it whatever the queue
	// holds.
	Truncated bool
	// Ungrouped is how many of the queue's pending jobs have no group.
	Ungrouped int64
	// Defaults are the queue's limits for every group without an
	// override of its own (GroupInfo's limit fields with Name "").
	Defaults GroupInfo
}

// GroupInfo is one group of a queue as Groups reads it.
type GroupInfo struct {
	Name string
	// Running is the group's number of valid leases (invariant 11), Ready
	// its pending jobs (its gready set).
	Running, Ready int64
	// The group's effective limits: its override where it sets one, else
	// the queue's default. MaxRunning 0: no maximum; Rate 0: no rate (at
	// most Rate starts per Per). Ordered: its jobs run one at a time, in
	// order (MaxRunning is then 1).
	MaxRunning int
	Rate       int
	Per        time.Duration
	Ordered    bool
	// Override: the group has limits of its own (some of them may still
	// take the default).
	Override bool
	// InTurn: the group waits for its turn in the rotation (a claim may
	// start one of its jobs now).
	InTurn bool
	// Waiting: the group is parked in the timer (full, cooling down for
	// its rate, or holding for an ordered retry) until WaitUntil, Redis's
	// clock; a claim looks at it again from then, or at once when one of
	// its slots frees.
	Waiting   bool
	WaitUntil time.Time
	// Held is the id of the job an ordered group must run next ("" when
	// none holds it).
	Held string
}

// Groups lists a queue's job groups: each with its running count, ready
// backlog, effective limits, whether it waits in the timer and its held
// job; the largest backlogs first. It reads the groups that have state
// (in the rotation, the timer or with running jobs) in script calls of at
// most GroupsScanStep groups each, up to GroupsScanCap of them, then the
// page's groups in one more call: a queue of a million groups costs the
// same as one of GroupsScanCap. With GroupsQuery.Name it reads only that
// group, in one call; a group with no state and no override answers an
// empty page.
func (b *Inspector) Groups(ctx context.Context, queue string, q GroupsQuery) (GroupsPage, error) {
	if err := validName("queue", queue); err != nil {
		return GroupsPage{}, err
	}
	if q.Limit < 0 || q.Limit > GroupsLimitMax {
		return GroupsPage{}, &ValidationError{Field: "limit", Value: fmt.Sprint(q.Limit),
			Reason: fmt.Sprintf("must be between 1 and %d (0 means %d)", GroupsLimitMax, GroupsLimitDefault)}
	}
	limit := cmp.Or(q.Limit, GroupsLimitDefault)
	k := b.queueKeys(queue)
	var page GroupsPage
	var names []string
	if q.Name != "" {
		if err := ValidateGroup(q.Name); err != nil {
			return GroupsPage{}, err
		}
		names = []string{q.Name}
	} else {
		found, truncated, err := b.scanGroups(ctx, k)
		if err != nil {
			return GroupsPage{}, fmt.Errorf("fenceq: list groups of queue %q: %w", queue, err)
		}
		page.Scanned, page.Truncated = len(found), truncated
		slices.SortFunc(found, byBacklog)
		for _, g := range found[:min(limit, len(found))] {
			names = append(names, g.Name)
		}
	}
	groups, err := b.groupDetail(ctx, k, names, &page)
	if err != nil {
		return GroupsPage{}, fmt.Errorf("fenceq: list groups of queue %q: %w", queue, err)
	}
	if q.Name != "" {
		groups = slices.DeleteFunc(groups, func(g GroupInfo) bool {
			return g.Running == 0 && g.Ready == 0 && !g.InTurn && !g.Waiting && g.Held == "" && !g.Override
		})
		page.Scanned = len(groups)
	}
	// The page's figures are read after the scan: sort by them, so the
	// page reads in its own order.
	slices.SortFunc(groups, byBacklog)
	page.Groups = groups
	return page, nil
}

// byBacklog orders groups by ready backlog, largest first, then by name.
func byBacklog(a, b GroupInfo) int {
	return cmp.Or(cmp.Compare(b.Ready, a.Ready), strings.Compare(a.Name, b.Name))
}

// scanGroups reads the groups that have state, in steps of GroupsScanStep
// entries: the rotation, the timer, then grunning's fields. It answers
// each group once with its ready backlog, and whether it stopped at
// GroupsScanCap entries read (a group in two of them is read twice) with
// some left unread.
func (b *Inspector) scanGroups(ctx context.Context, k *queueKeys) (found []GroupInfo, truncated bool, err error) {
	seen := map[string]bool{}
	read := 0
	for _, source := range []string{"rotation", "wait", "running"} {
		pos, last := "", ""
		if source == "running" {
			pos = "0"
		}
		for {
			if read >= GroupsScanCap {
				return found, true, nil
			}
			v, err := b.run(ctx, b.scripts.groups, k, "scan", source, pos, last, min(GroupsScanStep, GroupsScanCap-read)).Result()
			r := newReply("groups", v, err)
			pos, last = r.str(), r.str()
			for r.more() {
				g, ready := r.str(), r.int()
				read++
				if !seen[g] {
					seen[g] = true
					found = append(found, GroupInfo{Name: g, Ready: ready})
				}
			}
			if r.err != nil {
				return nil, false, r.err
			}
			if pos == "" || source == "running" && pos == "0" {
				break
			}
		}
	}
	return found, false, nil
}

// groupDetail reads what a page shows of the named groups (and the
// queue's defaults and ungrouped count, into page) in one script call.
func (b *Inspector) groupDetail(ctx context.Context, k *queueKeys, names []string, page *GroupsPage) ([]GroupInfo, error) {
	args := []any{"detail"}
	for _, g := range names {
		args = append(args, g)
	}
	v, err := b.run(ctx, b.scripts.groups, k, args...).Result()
	r := newReply("groups", v, err)
	def := GroupLimits{MaxRunning: atoi(r.str())}
	if rate, per := atoi(r.str()), atoi(r.str()); rate > 0 && per > 0 {
		def.Rate, def.Per = rate, time.Duration(per)*time.Millisecond
	}
	def.Ordered = r.str() == "1"
	page.Ungrouped = r.int()
	page.Defaults = groupInfo(def, "")
	out := make([]GroupInfo, 0, len(names))
	for _, name := range names {
		running, ready, override, turn, wait, held := r.str(), r.int(), r.str(), r.str(), r.str(), r.str()
		if r.err != nil {
			break
		}
		g := groupInfo(def, override)
		g.Name, g.Ready, g.Held = name, ready, held
		g.Running, _ = strconv.ParseInt(running, 10, 64)
		g.InTurn = turn != ""
		if wait != "" {
			ms, err := strconv.ParseFloat(wait, 64)
			if err == nil {
				g.Waiting, g.WaitUntil = true, msTime(int64(ms))
			}
		}
		out = append(out, g)
	}
	if r.err != nil {
		return nil, r.err
	}
	return out, nil
}

// groupInfo is a group's limits: its glimits value override read as
// GroupLimits reads it (parseOverride), over the queue's defaults def.
func groupInfo(def GroupLimits, override string) GroupInfo {
	o := parseOverride(override)
	set := o.MaxRunning || o.Rate || o.Ordered
	var ov *GroupOverride
	if set {
		ov = &o
	}
	e := effective(def, ov)
	return GroupInfo{MaxRunning: e.MaxRunning, Rate: e.Rate, Per: e.Per, Ordered: e.Ordered, Override: set}
}
