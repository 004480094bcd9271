package host_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/internal/fakemodel"
	"github.com/agentichost/agentic/ledger"
)

var secretRE = regexp.MustCompile(`secret code is (\w+)`)

// rememberingModel reads its whole prompt, as a real model would: it
// answers a question about the secret code from anything in the prompt,
// and writes compaction notes that keep the facts it sees.
func rememberingModel(req fakemodel.Request) fakemodel.Reply {
	var all strings.Builder
	for _, m := range req.Messages {
		all.WriteString(m.Text + "\n")
	}
	code := ""
	if m := secretRE.FindStringSubmatch(all.String()); m != nil {
		code = m[1]
	}
	if len(req.Messages) > 0 && req.Messages[0].Role == "system" && strings.HasPrefix(req.Messages[0].Text, "[compaction]") {
		note := "NOTE: the user chatted about filler."
		if code != "" {
			note += " The user's secret code is " + code + "."
		}
		return fakemodel.Reply{Text: note}
	}
	last := req.Messages[len(req.Messages)-1].Text
	if strings.Contains(last, "what is my secret code") {
		if code == "" {
			return fakemodel.Reply{Text: "I do not know your code."}
		}
		return fakemodel.Reply{Text: "Your code is " + code + "."}
	}
	return fakemodel.Reply{Text: "Noted."}
}

func filler(i int) string {
	return fmt.Sprintf("Filler message %d. ", i) + strings.Repeat("lorem ipsum dolor sit amet ", 30)
}

func TestChatSurvivesTwoCompactions(t *testing.T) {
	hs := newHarness(t, fakemodel.Options{Models: map[string]int{"fake/small": 2000}, Respond: rememberingModel},
		host.Agent{Model: "fake/small"}, func(o *host.Options) {
			o.Compaction = &host.Compaction{Limit: 0.3, KeepRecent: 2}
		})
	sess := hs.host.Session("long")
	ctx := context.Background()
	send := func(text string) host.RunResult {
		t.Helper()
		res, err := sess.Send(ctx, text, host.SendOptions{})
		if err != nil || res.Status != ledger.RunCompleted {
			t.Fatalf("%q: %+v %v", text[:20], res, err)
		}
		return res
	}
	send("Remember this: my secret code is ZEBRA42. " + filler(0))
	for i := 1; i <= 8; i++ {
		send(filler(i))
	}
	res := send("Tell me: what is my secret code?")
	if res.Text != "Your code is ZEBRA42." {
		t.Errorf("answer = %q", res.Text)
	}
	evs := hs.events("long")
	compactions := 0
	for _, e := range evs {
		if e.Compaction != nil {
			compactions++
		}
	}
	if compactions < 2 {
		t.Fatalf("%d compactions, want at least 2", compactions)
	}
	tr, _ := sess.Transcript(ctx)
	if len(tr.Items) != 20 {
		t.Errorf("transcript has %d items, want 20 (10 turns; compactions never show)", len(tr.Items))
	}
	for _, it := range tr.Items {
		if strings.Contains(it.Text, "NOTE:") {
			t.Errorf("a compaction note shows in the transcript: %+v", it)
		}
	}
	// The model's last prompt no longer holds the first message: only the
	// note carries the code.
	reqs := hs.model.Requests()
	// Session.Messages is the conversation as the model sees it: what it
	// was last sent — the last compaction's note standing for what it
	// summarised, then the turns after it — and its answer.
	sent := reqs[len(reqs)-1].Messages
	after, err := sess.Messages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != len(sent)+1 || after[len(after)-1].Role != ledger.RoleAssistant || after[len(after)-1].Text() != "Your code is ZEBRA42." {
		t.Fatalf("Session.Messages has %d messages, want the last prompt's %d and the answer: %+v", len(after), len(sent), after)
	}
	for i, m := range sent {
		if m.Role != string(after[i].Role) || m.Text != after[i].Text() {
			t.Errorf("the model was sent %s %.60q, Session.Messages[%d] is %s %.60q", m.Role, m.Text, i, after[i].Role, after[i].Text())
		}
	}
	if !strings.Contains(after[0].Text(), "NOTE:") {
		t.Errorf("Session.Messages starts with %s %.60q, want the compaction's note", after[0].Role, after[0].Text())
	}
	for _, m := range reqs[len(reqs)-1].Messages {
		if strings.Contains(m.Text, "Remember this") {
			t.Error("the last prompt still holds the first message")
		}
	}
}

// TestOverflowCompactsAndRetriesOnce: a pass the provider refuses as over
// the context window compacts the session and is made again, once; the
// session keeps its facts through the notes.
func TestOverflowCompactsAndRetriesOnce(t *testing.T) {
	hs := newHarness(t, fakemodel.Options{Models: map[string]int{"fake/tiny": 700}, Respond: rememberingModel},
		host.Agent{Model: "fake/tiny"}, func(o *host.Options) { o.Compaction = &host.Compaction{KeepRecent: 1, Limit: 1} })
	sess := hs.host.Session("ovf")
	ctx := context.Background()
	if _, err := sess.Send(ctx, "my secret code is OTTER7. "+filler(0), host.SendOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 4; i++ {
		res, err := sess.Send(ctx, filler(i), host.SendOptions{})
		if err != nil || res.Status != ledger.RunCompleted {
			t.Fatalf("send %d: %+v %v", i, res, err)
		}
	}
	res, err := sess.Send(ctx, "what is my secret code?", host.SendOptions{})
	if err != nil || res.Text != "Your code is OTTER7." {
		t.Fatalf("%+v %v", res, err)
	}
	compactions := 0
	for _, e := range hs.events("ovf") {
		if e.Compaction != nil {
			compactions++
		}
	}
	if compactions == 0 {
		t.Error("no compaction after the overflow")
	}

	// A message that overflows the window by itself: the pass compacts
	// the older turns and is made once more, overflows again, and the run
	// fails — no second compaction, no third attempt.
	before, requests := compactions, hs.model.RequestCount()
	res, err = sess.Send(ctx, strings.Repeat("far too long ", 300), host.SendOptions{})
	if err != nil || res.Status != ledger.RunFailed || !strings.Contains(res.Reason, "context") {
		t.Fatalf("a message larger than the window: %+v %v; want failed on the context", res, err)
	}
	compactions = hosttest.CountKind(hs.events("ovf"), ledger.KindCompaction)
	passes := 0
	for _, r := range hs.model.Requests()[requests:] {
		if !strings.HasPrefix(r.Messages[0].Text, "[compaction]") {
			passes++
		}
	}
	if compactions-before > 1 || passes != 2 {
		t.Errorf("%d compactions and %d attempts of the pass, want at most one and two", compactions-before, passes)
	}
}

// TestCompactionTurnsOldMediaIntoText: an image older than KeepRecent
// reaches the summariser, and after the compaction the model sees only the
// note's words for it.
func TestCompactionTurnsOldMediaIntoText(t *testing.T) {
	png := []byte{0x89, 'P', 'N', 'G', 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 0x0d}
	sawImage := false
	hs := newHarness(t, fakemodel.Options{Models: map[string]int{"fake/small": 2000}, Respond: func(req fakemodel.Request) fakemodel.Reply {
		if strings.HasPrefix(req.Messages[0].Text, "[compaction]") {
			for _, m := range req.Messages {
				for _, p := range m.Parts {
					if p.Type == "image_url" {
						sawImage = true
					}
				}
			}
			return fakemodel.Reply{Text: "NOTE: the user showed a PNG of a red square."}
		}
		return fakemodel.Reply{Text: "Noted."}
	}}, host.Agent{Model: "fake/small"}, func(o *host.Options) { o.Compaction = &host.Compaction{Limit: 0.3, KeepRecent: 2} })
	sess := hs.host.Session("media")
	ctx := context.Background()
	if _, err := sess.Send(ctx, "Look at this picture.", host.SendOptions{Parts: []ledger.Part{{Type: ledger.PartImage, MIME: "image/png", Data: png}}}); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 5; i++ {
		if _, err := sess.Send(ctx, filler(i), host.SendOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if !sawImage {
		t.Fatal("the summariser never saw the image")
	}
	reqs := hs.model.Requests()
	for _, m := range reqs[len(reqs)-1].Messages {
		for _, p := range m.Parts {
			if p.Type == "image_url" {
				t.Error("the image is still in the prompt after the compaction")
			}
		}
	}
	tr, _ := sess.Transcript(ctx)
	if p := tr.Items[0].Parts; len(p) != 2 || p[1].Type != ledger.PartImage || string(p[1].Data) != string(png) {
		t.Errorf("the transcript lost the image: %+v", tr.Items[0])
	}
}

// TestCompactionMidRun: an agent deep in one task compacts between its
// steps, not only at a run's start: a run that reads eight long pages with
// a tool, in a window that holds about two, compacts within the run (a
// compaction of the run, after its first step), keeps going from the
// notes, and answers with a fact of its first message.
func TestCompactionMidRun(t *testing.T) {
	var pages atomic.Int32
	respond := func(req fakemodel.Request) fakemodel.Reply {
		if len(req.Messages) > 0 && req.Messages[0].Role == "system" && strings.HasPrefix(req.Messages[0].Text, "[compaction]") {
			return rememberingModel(req)
		}
		last := req.Messages[len(req.Messages)-1]
		if last.Role == "tool" && strings.HasPrefix(last.Text, "page 8 ") {
			return rememberingModel(fakemodel.Request{Messages: append(req.Messages, fakemodel.Message{Role: "user", Text: "what is my secret code"})})
		}
		return fakemodel.Reply{ToolCalls: []fakemodel.ToolCall{{Name: "read_page", Arguments: `{}`}}}
	}
	readPage := host.NewTool(host.ToolSpec{Name: "read_page", Description: "Reads the next page."}, func(context.Context, host.ToolCall) (host.ToolResult, error) {
		n := pages.Add(1)
		return host.ToolResult{Output: fmt.Sprintf("page %d ", n) + filler(int(n))}, nil
	})
	hs := newHarness(t, fakemodel.Options{Models: map[string]int{"fake/small": 2000}, Respond: respond},
		host.Agent{Model: "fake/small", Tools: []host.Tool{readPage}, MaxSteps: 20}, func(o *host.Options) {
			o.Compaction = &host.Compaction{Limit: 0.3, KeepRecent: 2}
		})
	res, err := hs.host.Session("deep").Send(context.Background(), "Remember this: my secret code is OTTER7. Now read eight pages.", host.SendOptions{})
	if err != nil || res.Status != ledger.RunCompleted {
		t.Fatalf("%+v %v", res, err)
	}
	if res.Text != "Your code is OTTER7." || pages.Load() != 8 {
		t.Fatalf("answer %q after %d pages", res.Text, pages.Load())
	}
	steps, midRun := 0, 0
	for _, e := range hs.events("deep") {
		if e.Step != nil && e.RunID == res.RunID {
			steps++
		}
		if e.Compaction != nil && steps > 0 {
			midRun++
		}
	}
	if midRun == 0 {
		t.Fatalf("no compaction after the run's first step (%d steps)", steps)
	}
}

// TestCompactionPerSession: an agent's own compaction (Agent.Compaction),
// bound to one session with SessionWith, compacts that session at its
// limit while a session of the host's agent, with the same turns, does
// not; a bad limit is refused naming the agent's field.
func TestCompactionPerSession(t *testing.T) {
	hs := newHarness(t, fakemodel.Options{Models: map[string]int{"fake/small": 2000}, Respond: rememberingModel},
		host.Agent{Model: "fake/small"}, func(o *host.Options) {
			o.Compaction = &host.Compaction{Limit: 1}
		})
	ctx := context.Background()
	tight, err := hs.host.SessionWith("tight", host.Agent{Model: "fake/small", Compaction: &host.Compaction{Limit: 0.3, KeepRecent: 2}})
	if err != nil {
		t.Fatal(err)
	}
	loose := hs.host.Session("loose")
	for _, sess := range []*host.Session{tight, loose} {
		for i := range 5 {
			text := filler(i)
			if i == 0 {
				text = "Remember this: my secret code is ZEBRA42. " + text
			}
			if res, err := sess.Send(ctx, text, host.SendOptions{}); err != nil || res.Status != ledger.RunCompleted {
				t.Fatalf("%s, message %d: %+v %v", sess.ID(), i, res, err)
			}
		}
	}
	count := func(session string) int { return hosttest.CountKind(hs.events(session), ledger.KindCompaction) }
	if n := count("tight"); n == 0 {
		t.Error("the session bound to an agent compacting at 0.3 of the window never compacted")
	}
	if n := count("loose"); n != 0 {
		t.Errorf("the host's session (compacting at the whole window) compacted %d times", n)
	}
	res, err := tight.Send(ctx, "Tell me: what is my secret code?", host.SendOptions{})
	if err != nil || res.Text != "Your code is ZEBRA42." {
		t.Errorf("after its compactions: %+v %v", res, err)
	}

	_, err = hs.host.SessionWith("bad", host.Agent{Model: "fake/small", Compaction: &host.Compaction{Limit: 2}})
	if !errors.Is(err, host.ErrInvalidInput) || !strings.Contains(fmt.Sprint(err), "Agent.Compaction.Limit") {
		t.Errorf("a limit of 2: %v", err)
	}
}
