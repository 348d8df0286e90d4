package broker_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
)

// miniredis supports WAIT but has no replicas: it always answers 0. So
// WaitReplicas=1 must answer ErrNotReplicated with the count, and the job
// must be stored all the same. (The success path, with a real replica, is
// in integration.TestEnqueueWaitReplicas.)
func TestEnqueueWaitReplicasMiniredis(t *testing.T) {
	mr := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	b, err := broker.New(c, broker.Options{WaitReplicas: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	id, err := b.Client().Enqueue(ctx, broker.Job{Queue: "q", Kind: "k"})
	if !errors.Is(err, broker.ErrNotReplicated) || !strings.Contains(err.Error(), "0 of 1 replicas") {
		t.Fatalf("Enqueue: %v, want ErrNotReplicated saying 0 of 1", err)
	}
	if j, err := b.Inspector().Job(ctx, "q", id); err != nil || j.State != broker.StatePending {
		t.Fatalf("the job should be stored anyway: %+v %v", j, err)
	}
	res := b.Client().EnqueueMany(ctx, []broker.Job{{Queue: "q", Kind: "k"}, {Queue: "q", Kind: "k", ID: id}, {Queue: "", Kind: "k"}})
	if !errors.Is(res[0].Err, broker.ErrNotReplicated) || !errors.Is(res[1].Err, broker.ErrJobExists) || !errors.Is(res[2].Err, broker.ErrInvalid) {
		t.Fatalf("EnqueueMany: %+v", res)
	}
	if _, err := broker.New(c, broker.Options{WaitReplicas: -1}); !errors.Is(err, broker.ErrInvalid) {
		t.Fatalf("negative WaitReplicas: %v, want ErrInvalid", err)
	}
}
