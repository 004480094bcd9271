// Command byhand holds a conversation with a model the way one writes it
// by hand: a retry loop with backoff, a JSON file it rewrites after each
// step, and a resume that finds the question a crash left unanswered. Run
// it with -crash-at 2 (it dies once the second question is saved), then
// again: it answers that question first, then goes on.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/agentichost/agentic/examples/beforeafter"
)

type message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

func main() {
	dir := flag.String("dir", ".byhand", "where the conversation is kept")
	crashAt := flag.Int("crash-at", 0, "die once question N is saved, before its answer")
	flag.Parse()
	model, err := beforeafter.FlakyModel()
	if err != nil {
		fail(err)
	}
	defer model.Close()
	path := filepath.Join(*dir, "conversation.json")
	os.MkdirAll(*dir, 0o755)

	// Persistence: the whole conversation, rewritten after each step
	// (through a temporary file, so that a crash leaves the old one).
	var msgs []message
	if b, err := os.ReadFile(path); err == nil {
		if err := json.Unmarshal(b, &msgs); err != nil {
			fail(fmt.Errorf("the saved conversation is damaged: %w", err))
		}
	}
	save := func() {
		b, _ := json.MarshalIndent(msgs, "", "  ")
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, b, 0o644); err != nil {
			fail(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			fail(err)
		}
	}
	// Resume: a question saved without its answer was cut by a crash.
	if n := len(msgs); n > 0 && msgs[n-1].Role == "user" {
		answer, err := ask(model.URL(), msgs)
		if err != nil {
			fail(err)
		}
		msgs = append(msgs, message{"assistant", answer})
		save()
		fmt.Println("(resumed)", answer)
	}
	asked := 0
	for _, m := range msgs {
		if m.Role == "user" {
			asked++
		}
	}
	for i, q := range beforeafter.Conversation[asked:] {
		msgs = append(msgs, message{"user", q})
		save()
		if asked+i+1 == *crashAt {
			fmt.Println("[crash]")
			os.Exit(1)
		}
		answer, err := ask(model.URL(), msgs)
		if err != nil {
			fail(err)
		}
		msgs = append(msgs, message{"assistant", answer})
		save()
		fmt.Println(answer)
	}
}

// ask sends the conversation and returns the answer, retrying what is
// worth retrying: 429 (after its Retry-After), 5xx and a dropped
// connection, with a doubling backoff, six attempts in all.
func ask(baseURL string, msgs []message) (string, error) {
	body, _ := json.Marshal(map[string]any{"model": "fake/echo", "messages": msgs})
	delay := 50 * time.Millisecond
	for attempt := 1; ; attempt++ {
		res, err := http.Post(baseURL+"/chat/completions", "application/json", bytes.NewReader(body))
		retry := err != nil
		if err == nil {
			var out struct {
				Choices []struct {
					Message message `json:"message"`
				} `json:"choices"`
			}
			decodeErr := json.NewDecoder(res.Body).Decode(&out)
			res.Body.Close()
			switch {
			case res.StatusCode == http.StatusOK && decodeErr == nil && len(out.Choices) > 0:
				return out.Choices[0].Message.Content, nil
			case res.StatusCode == http.StatusTooManyRequests || res.StatusCode >= 500:
				retry = true
				if s, err := strconv.Atoi(res.Header.Get("Retry-After")); err == nil {
					delay = max(delay, time.Duration(s)*time.Second)
				}
			default:
				return "", fmt.Errorf("the model answered %s", res.Status)
			}
		}
		if !retry || attempt == 6 {
			return "", errors.Join(errors.New("the model failed six times"), err)
		}
		fmt.Printf("[retrying in %s]\n", delay)
		time.Sleep(delay)
		delay = min(2*delay, 2*time.Second)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "byhand:", err)
	os.Exit(1)
}
