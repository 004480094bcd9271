package host_test

import (
	"context"
	"reflect"
	"testing"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/hosttest"
)

// TestOverview: a session's overview is its Status and Usage as those
// report them, and the time of its last event; a session with no events is
// idle, with nothing used and no activity.
func TestOverview(t *testing.T) {
	hs := hosttest.New(t, host.Options{})
	ctx := context.Background()
	sess := hs.Host.Session("s")
	if _, err := sess.Send(ctx, "hello", host.SendOptions{}); err != nil {
		t.Fatal(err)
	}
	o, err := sess.Overview(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := sess.Status(ctx)
	u, _ := sess.Usage(ctx)
	events := hs.Events("s")
	if !reflect.DeepEqual(o.Status, st) || !reflect.DeepEqual(o.Usage, u) || !o.LastActivity.Equal(events[len(events)-1].Time) {
		t.Errorf("overview %+v; status %+v, usage %+v, last event at %v", o, st, u, events[len(events)-1].Time)
	}
	if o.Usage.Total.TotalTokens == 0 || o.LastActivity.IsZero() {
		t.Errorf("a session that ran: %+v", o)
	}
	empty, err := hs.Host.Session("none").Overview(ctx)
	if err != nil || empty.Status.State != host.StateIdle || empty.Usage.Cost != 0 || !empty.LastActivity.IsZero() || len(empty.Usage.Runs) != 0 {
		t.Errorf("a session with no events: %+v %v", empty, err)
	}
}
