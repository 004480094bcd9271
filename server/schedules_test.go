package server_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/host/model"
	"github.com/agentichost/agentic/internal/redistest"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/server"
	"github.com/agentichost/agentic/storage"
	"github.com/agentichost/agentic/storage/memory"
	"github.com/agentichost/agentic/storage/redis"
)

// schedClock is a clock a test sets.
type schedClock struct {
	mu sync.Mutex
	t  time.Time
}

func newSchedClock(t *testing.T, at string) *schedClock {
	c := &schedClock{}
	c.set(t, at)
	return c
}

func (c *schedClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *schedClock) set(t *testing.T, at string) {
	v, err := time.Parse(time.RFC3339, at)
	if err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	c.t = v
	c.mu.Unlock()
}

// withSchedules gives acme schedules and agents, and the servers the
// clock c (polled every 10ms).
func withSchedules(c *schedClock, store storage.Storage, agents map[string]server.AgentConfig, list ...server.ScheduleConfig) serverSetup {
	return serverSetup{Store: store, Mutate: func(cfg *server.Config) {
		acme := cfg.Tenants["acme"]
		acme.Agents, acme.Schedules = agents, list
		cfg.Tenants["acme"] = acme
	}, Options: func(o *server.Options) { server.SetScheduleClock(o, c.now, 10*time.Millisecond) }}
}

// scheduleList is GET /v1/schedules's answer.
type scheduleList struct {
	Schedules []struct {
		ID, Session, Agent, Cron, Timezone, Text, Missed, Source string
		Next                                                     time.Time
		Last                                                     *struct {
			Occurrence time.Time
			Outcome    string
			MessageID  string `json:"message_id"`
			RunID      string `json:"run_id"`
		}
	}
}

func (ts *testServer) schedules(t *testing.T, key string) scheduleList {
	t.Helper()
	code, body := ts.do(t, key, "GET", "/v1/schedules", "")
	if code != 200 {
		t.Fatalf("GET /v1/schedules: %d %s", code, body)
	}
	return decodeJSON[scheduleList](t, body)
}

// inputsOf returns the request ids of a tenant's session's messages.
func inputsOf(t *testing.T, store storage.Storage, tenant, session string) []string {
	var ids []string
	for _, ev := range hosttest.Load(t, store, tenant+":"+session) {
		if ev.Input != nil {
			ids = append(ids, ev.Input.RequestID)
		}
	}
	return ids
}

// answered waits until the tenant's session has settled, every message
// answered.
func answered(t *testing.T, store storage.Storage, tenant, session string) []ledger.Event {
	t.Helper()
	return hosttest.WaitLedger(t, store, tenant+":"+session, 15*time.Second, "session "+session+" answered", func(evs []ledger.Event) bool {
		return hosttest.Settled(evs) && len(ledger.PendingInputs(evs)) == 0
	})
}

// TestServeSchedules: a schedule of the configuration fires through serve
// as an ordinary message, answered by a run, its request id naming the
// schedule and the occurrence; GET /v1/schedules shows it with its next
// occurrence and its last, with the message and the run. Schedules made
// through the API fire the same way, may be replaced and deleted; the
// configuration's may not (409); another tenant sees none of acme's.
func TestServeSchedules(t *testing.T) {
	c := newSchedClock(t, "2026-12-03T06:59:30Z")
	store := memory.New()
	ts := startServer(t, withSchedules(c, store, nil,
		server.ScheduleConfig{ID: "digest", Session: "daily", Cron: "0 8 * * *", Timezone: "Europe/Paris", Text: "the morning digest"}))
	if err := server.TickSchedules(ts.srv); err != nil {
		t.Fatal(err)
	}
	l := ts.schedules(t, ts.acme)
	if len(l.Schedules) != 1 {
		t.Fatalf("%+v", l)
	}
	d := l.Schedules[0]
	if d.ID != "digest" || d.Source != "config" || d.Agent != "default" || d.Missed != "run_once" || d.Last != nil ||
		!d.Next.Equal(time.Date(2026, 12, 3, 7, 0, 0, 0, time.UTC)) {
		t.Errorf("before it fires: %+v", d)
	}

	c.set(t, "2026-12-03T07:00:02Z")
	evs := hosttest.WaitLedger(t, store, "acme:daily", 15*time.Second, "the occurrence answered", func(evs []ledger.Event) bool {
		return len(evs) > 0 && hosttest.Settled(evs)
	})
	if got := strings.Join(inputsOf(t, store, "acme", "daily"), ","); got != "schedule:digest@2026-12-03T07:00:00Z" {
		t.Fatalf("messages %s", got)
	}
	var msgID, runID, answer string
	for _, ev := range evs {
		switch {
		case ev.Input != nil:
			msgID = ev.Input.MessageID
		case ev.RunStart != nil:
			runID = ev.RunID
		case ev.RunEnd != nil && ev.RunEnd.Status != ledger.RunCompleted:
			t.Errorf("the run ended %s", ev.RunEnd.Status)
		case ev.Step != nil:
			answer += ev.Step.Text
		}
	}
	if !strings.Contains(answer, "the morning digest") {
		t.Errorf("the answer %q", answer)
	}
	waitFor(t, "the last occurrence listed", func() bool {
		l = ts.schedules(t, ts.acme)
		return l.Schedules[0].Last != nil
	})
	if last := l.Schedules[0].Last; last.Outcome != "sent" || last.MessageID != msgID || last.RunID != runID ||
		!last.Occurrence.Equal(time.Date(2026, 12, 3, 7, 0, 0, 0, time.UTC)) || !l.Schedules[0].Next.Equal(time.Date(2026, 12, 4, 7, 0, 0, 0, time.UTC)) {
		t.Errorf("after it fired: %+v, last %+v; want message %s of run %s", l.Schedules[0], last, msgID, runID)
	}
	// The transcript is an ordinary session's.
	if code, body := ts.do(t, ts.acme, "GET", "/v1/sessions/daily/transcript", ""); code != 200 || !strings.Contains(body, "the morning digest") {
		t.Errorf("transcript: %d %s", code, body)
	}

	// Through the API.
	code, body := ts.do(t, ts.acme, "POST", "/v1/schedules", `{"id":"hourly","session":"h","cron":"0 * * * *","text":"tick"}`)
	if code != 201 || !strings.Contains(body, `"source":"api"`) || !strings.Contains(body, `"next":"2026-12-03T08:00:00Z"`) {
		t.Fatalf("POST: %d %s", code, body)
	}
	if code, body := ts.do(t, ts.acme, "POST", "/v1/schedules", `{"id":"hourly","session":"h","cron":"30 * * * *","text":"tock"}`); code != 200 || !strings.Contains(body, `"text":"tock"`) {
		t.Fatalf("POST again replaces: %d %s", code, body)
	}
	c.set(t, "2026-12-03T07:30:01Z")
	answered(t, store, "acme", "h")
	if got := strings.Join(inputsOf(t, store, "acme", "h"), ","); got != "schedule:hourly@2026-12-03T07:30:00Z" {
		t.Fatalf("messages %s", got)
	}
	if got := inputsOf(t, store, "acme", "daily"); len(got) != 1 {
		t.Errorf("digest fired again: %v", got)
	}
	for _, tc := range []struct {
		method, path, body string
		code               int
		want               string
	}{
		{"POST", "/v1/schedules", `{"id":"digest","session":"daily","cron":"0 9 * * *","text":"x"}`, 409, "configuration"},
		{"DELETE", "/v1/schedules/digest", "", 409, "configuration"},
		{"POST", "/v1/schedules", `{"id":"bad one","session":"bad session","cron":"61 * * * *","timezone":"Mars/Olympus","agent":"nobody","missed":"sometimes"}`, 400,
			"bad one"},
		{"POST", "/v1/schedules", `{"id":"x","session":"s","cron":"* * * * *","text":"t","every":"day"}`, 400, `unknown field`},
		{"DELETE", "/v1/schedules/hourly", "", 200, `"deleted":true`},
		{"DELETE", "/v1/schedules/hourly", "", 404, "no schedule"},
	} {
		code, body := ts.do(t, ts.acme, tc.method, tc.path, tc.body)
		if code != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("%s %s %s: %d %s, want %d %q", tc.method, tc.path, tc.body, code, body, tc.code, tc.want)
		}
	}
	_, body = ts.do(t, ts.acme, "POST", "/v1/schedules", `{"id":"bad one","session":"bad session","cron":"61 * * * *","timezone":"Mars/Olympus","agent":"nobody","missed":"sometimes"}`)
	for _, want := range []string{"session", "text is required", "cron", "timezone", "agent", "missed"} {
		if !strings.Contains(body, want) {
			t.Errorf("a bad schedule: %s, want %q", body, want)
		}
	}
	if l := ts.schedules(t, ts.acme); len(l.Schedules) != 1 {
		t.Errorf("after the delete: %+v", l)
	}
	if _, body := ts.do(t, ts.beta, "GET", "/v1/schedules", ""); body != "{\"schedules\":[]}\n" {
		t.Errorf("beta's schedules: %s", body)
	}
}

// TestServeSchedulesMissed: occurrences that passed while no host ran
// fire once when one starts (run_once) or not at all (skip, shown as
// skipped); a schedule made through the API outlives the host that made
// it.
func TestServeSchedulesMissed(t *testing.T) {
	store := memory.New()
	c := newSchedClock(t, "2026-12-03T07:00:00Z")
	list := []server.ScheduleConfig{
		{ID: "once", Session: "s1", Cron: "0 8 * * *", Text: "catch up"},
		{ID: "skip", Session: "s2", Cron: "0 8 * * *", Text: "never late", Missed: "skip"},
	}
	first := startServer(t, withSchedules(c, store, nil, list...))
	if code, body := first.do(t, first.acme, "POST", "/v1/schedules", `{"id":"made","session":"s3","cron":"0 8 * * *","text":"kept"}`); code != 201 {
		t.Fatalf("%d %s", code, body)
	}
	if err := server.TickSchedules(first.srv); err != nil {
		t.Fatal(err)
	}
	first.stop(t)

	// Every host was down for three days; one starts.
	c.set(t, "2026-12-06T09:30:00Z")
	ts := startServer(t, withSchedules(c, store, nil, list...))
	answered(t, store, "acme", "s1")
	answered(t, store, "acme", "s3")
	if err := server.TickSchedules(ts.srv); err != nil {
		t.Fatal(err)
	}
	for session, want := range map[string]string{"s1": "schedule:once@2026-12-06T08:00:00Z", "s3": "schedule:made@2026-12-06T08:00:00Z"} {
		if got := strings.Join(inputsOf(t, store, "acme", session), ","); got != want {
			t.Errorf("%s: messages %s, want %s", session, got, want)
		}
	}
	if got := inputsOf(t, store, "acme", "s2"); len(got) != 0 {
		t.Errorf("skip fired: %v", got)
	}
	outcomes := map[string]string{}
	for _, s := range ts.schedules(t, ts.acme).Schedules {
		if s.Last != nil {
			outcomes[s.ID] = s.Last.Outcome + "@" + s.Last.Occurrence.Format(time.RFC3339)
		}
	}
	want := map[string]string{"once": "sent@2026-12-06T08:00:00Z", "skip": "skipped@2026-12-06T08:00:00Z", "made": "sent@2026-12-06T08:00:00Z"}
	for id, w := range want {
		if outcomes[id] != w {
			t.Errorf("%s: last %q, want %q", id, outcomes[id], w)
		}
	}
}

// TestServeSchedulesOverlap: an occurrence found while the session's run
// works follows its agent's overlap rule: with reject it is not sent, and
// GET /v1/schedules names the run that worked.
func TestServeSchedulesOverlap(t *testing.T) {
	store := memory.New()
	c := newSchedClock(t, "2026-12-03T07:59:00Z")
	agents := map[string]server.AgentConfig{"default": {}, "strict": {Overlap: "reject"}}
	ts := startServer(t, withSchedules(c, store, agents,
		server.ScheduleConfig{ID: "o", Session: "busy", Agent: "strict", Cron: "0 8 * * *", Text: "scheduled"}))
	ts.model.Respond = func(req model.Request) hosttest.Reply {
		if m := req.Messages[len(req.Messages)-1]; strings.Contains(m.Text(), "stall") {
			return hosttest.Reply{Text: "thinking ", Stall: time.Hour}
		}
		return hosttest.DefaultReply(req)
	}
	if err := server.TickSchedules(ts.srv); err != nil {
		t.Fatal(err)
	}
	code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/busy/messages", `{"text":"stall","agent":"strict"}`)
	if code != 202 {
		t.Fatalf("%d %s", code, body)
	}
	runID := decodeJSON[struct {
		RunID string `json:"run_id"`
	}](t, body).RunID
	c.set(t, "2026-12-03T08:00:01Z")
	var l scheduleList
	waitFor(t, "the occurrence dealt with", func() bool {
		l = ts.schedules(t, ts.acme)
		return l.Schedules[0].Last != nil
	})
	if last := l.Schedules[0].Last; last.Outcome != "rejected" || last.RunID != runID || last.MessageID != "" {
		t.Errorf("last %+v, want rejected naming run %s", last, runID)
	}
	if got := inputsOf(t, store, "acme", "busy"); len(got) != 1 || got[0] != "" {
		t.Errorf("messages %q: want the user's only", got)
	}
	if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/busy/cancel", ""); code != 200 {
		t.Errorf("cancel: %d %s", code, body)
	}
	ts.waitState(t, ts.acme, "busy", "cancelled")
}

// TestServeSchedulesConfig: the configuration's schedules are checked at
// start, every problem at once.
func TestServeSchedulesConfig(t *testing.T) {
	cfg := server.Config{Tenants: map[string]server.TenantConfig{"acme": {Models: []string{"m"}, Schedules: []server.ScheduleConfig{
		{ID: "a", Session: "bad session", Cron: "0 8 * * *", Text: "x"},
		{ID: "b", Session: "s", Cron: "0 25 * * *", Text: "x"},
		{ID: "c", Session: "s", Cron: "0 8 * * *", Timezone: "Mars/Olympus", Text: "x"},
		{ID: "d", Session: "s", Cron: "0 8 * * *", Agent: "nobody", Text: "x"},
		{ID: "d", Session: "s", Cron: "0 8 * * *", Text: ""},
	}}}}
	_, err := server.New(server.Options{Config: cfg, Storage: memory.New(), Model: hosttest.NewModel()})
	for _, want := range []string{
		`tenants.acme: schedules[0] (a): schedule a: session "bad session" is not a valid session id`,
		`tenants.acme: schedules[1] (b): schedule b: cron "0 25 * * *"`,
		`tenants.acme: schedules[2] (c): schedule c: timezone: unknown time zone Mars/Olympus`,
		`tenants.acme: schedules[3] (d): agent "nobody" is not among the tenant's agents`,
		`tenants.acme: schedules[4] (d): the id d is taken`,
		`tenants.acme: schedules[4] (d): schedule d: text is required`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%v\nwant %q", err, want)
		}
	}
	// The YAML key.
	dir := t.TempDir()
	loaded, err := server.LoadConfig(writeFile(t, dir, "c.yaml", `tenants:
  acme:
    schedules:
      - {id: digest, session: daily, agent: default, cron: "0 8 * * *", timezone: Europe/Paris, text: "the digest", missed: skip}
`))
	if err != nil {
		t.Fatal(err)
	}
	if got := loaded.Tenants["acme"].Schedules; len(got) != 1 || got[0] != (server.ScheduleConfig{ID: "digest", Session: "daily", Agent: "default",
		Cron: "0 8 * * *", Timezone: "Europe/Paris", Text: "the digest", Missed: "skip"}) {
		t.Errorf("loaded %+v", got)
	}
}

// TestServeSchedulesStopOnDrain: a draining server (SIGTERM's first step)
// stops firing at once and gives its schedules' lease up rather than
// letting it lapse, so that another host takes the schedules over; later
// occurrences are not fired by it.
func TestServeSchedulesStopOnDrain(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	store, err := redis.Open(t.Context(), srv.URL(), redis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	c := newSchedClock(t, "2026-12-03T06:59:30Z")
	setup := withSchedules(c, store, nil, server.ScheduleConfig{ID: "tick", Session: "s", Cron: "* * * * *", Text: "tick"})
	mutate := setup.Mutate
	setup.Mutate = func(cfg *server.Config) {
		mutate(cfg)
		cfg.LeaseTTL = server.Duration(time.Hour) // a lease given up, not lapsed
	}
	ts := startServer(t, setup)
	if err := server.TickSchedules(ts.srv); err != nil { // the schedule known before its time comes
		t.Fatal(err)
	}
	c.set(t, "2026-12-03T07:00:01Z")
	answered(t, store, "acme", "s")
	holder, _, err := store.LeaseHolder(t.Context(), "schedules.acme")
	if err != nil || holder == "" {
		t.Fatalf("the schedules' lease while firing: %q %v", holder, err)
	}
	ts.srv.Drain()
	if holder, _, err := store.LeaseHolder(t.Context(), "schedules.acme"); err != nil || holder != "" {
		t.Errorf("the schedules' lease after Drain: held by %q (%v), want given up", holder, err)
	}
	// The next occurrences pass: nothing fires. (Drain returned once the
	// runners stopped; the wait gives a runner that still polled fifty
	// polls to show itself.)
	c.set(t, "2026-12-03T07:02:01Z")
	time.Sleep(500 * time.Millisecond)
	if got := inputsOf(t, store, "acme", "s"); len(got) != 1 {
		t.Errorf("messages after Drain: %q, want the one before", got)
	}
}
