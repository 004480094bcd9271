package main

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// clientEnv makes the test binary the client process: "URL SESSIONS WORDS".
const clientEnv = "AGENTIC_LOAD_TEST_CLIENT"

func TestMain(m *testing.M) {
	if v := os.Getenv(clientEnv); v != "" {
		f := strings.Fields(v)
		n, _ := strconv.Atoi(f[1])
		words, _ := strconv.Atoi(f[2])
		if err := runClient(f[0], n, words); err != nil {
			fmt.Fprintln(os.Stderr, "load client:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestLoadSmall runs the load with a few sessions over each storage, so
// that make load keeps working: every run completes, every stream shows
// its answer whole, and the figures are filled in.
func TestLoadSmall(t *testing.T) {
	client := func(url string, sessions, words int) (*exec.Cmd, error) {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %d %d", clientEnv, url, sessions, words))
		return cmd, nil
	}
	for _, name := range []string{"file", "memory"} {
		t.Run(name, func(t *testing.T) {
			r, err := measure(name, 20, 5, time.Millisecond, client)
			if err != nil {
				t.Fatal(err)
			}
			if r.accept.Completed != 20 || r.appends != 60 || r.accept.Events < 20 || r.accept.AcceptP50 <= 0 || r.appendP50 <= 0 {
				t.Errorf("report = %+v", r)
			}
		})
	}
}
