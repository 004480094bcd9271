#!/usr/bin/env bash
# The runnable demos, each offline (the fake model), each one command:
#   scripts/demo.sh chaos|restart|compaction|queue|task|approval|media|beforeafter
# (make demo-NAME builds the binary and runs it). Each prints the commands
# it runs, then what they print.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-bin/agentic-host}
name=${1:?usage: scripts/demo.sh chaos|restart|compaction|queue|task|approval|media|beforeafter}
dir=${DEMO_DIR:-.demo}/$name
rm -rf "$dir"
mkdir -p "$dir"
store="file:$dir/sessions"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

say() { printf '\n\033[1m$ %s\033[0m\n' "$*"; }
run() { say "$*"; "$@"; }

# fake FLAGS… starts the fake model server; sets FAKE_URL.
fake() {
	"$BIN" fake-provider --addr 127.0.0.1:0 "$@" >"$dir/fake.log" 2>&1 &
	pids+=($!)
	for _ in $(seq 100); do
		FAKE_URL=$(sed -n 's/.*base URL \(http[^ ]*\).*/\1/p' "$dir/fake.log")
		[ -n "$FAKE_URL" ] && return 0
		sleep 0.05
	done
	echo "the fake model did not start:" >&2
	cat "$dir/fake.log" >&2
	exit 1
}

case $name in
chaos)
	# Injected faults (429 with Retry-After, 500, 502, a severed stream, a
	# mid-stream error chunk) are retried inside the same reply; the
	# transcript holds the exact text, once.
	fake --faults rate=0.5,kinds=429+500+502+sever+errorchunk,seed=7
	run "$BIN" chat --base-url "$FAKE_URL" --storage "$store" --session chaos \
		"Through every fault, this exact sentence comes back once."
	run "$BIN" transcript --storage "$store" chaos
	;;
restart)
	# A chat process is killed (SIGKILL) mid-reply; the next chat in the
	# session resumes the interrupted run into the same item, then answers.
	fake --latency 40ms
	words=$(seq -s ' ' 1 120)
	say "$BIN chat --base-url $FAKE_URL --storage $store --session r \"count: 1 2 … 120\" &   # then kill -9 after 1.5s"
	"$BIN" chat --base-url "$FAKE_URL" --storage "$store" --session r "count: $words" &
	pid=$!
	sleep 1.5
	kill -9 "$pid"
	wait "$pid" 2>/dev/null || true
	echo
	echo "[killed with SIGKILL mid-reply]"
	run "$BIN" chat --base-url "$FAKE_URL" --storage "$store" --session r "Are you back?"
	run "$BIN" transcript --storage "$store" r
	;;
compaction)
	# A model with a 2,000-token window: the session is compacted as it
	# grows (twice or more), and a fact from its first message survives.
	fake --context-window fake/small=2000
	filler=$(printf 'lorem ipsum dolor sit amet %.0s' $(seq 30))
	chat=("$BIN" chat --base-url "$FAKE_URL" --model fake/small --compaction-limit 0.3 --storage "$store" --session c)
	run "${chat[@]}" "Remember this: my secret code is ZEBRA42. $filler"
	for i in 1 2 3 4 5 6 7 8; do
		say "${chat[*]} \"filler $i …\""
		"${chat[@]}" "Filler message $i. $filler" | cut -c1-60
	done
	run "${chat[@]}" "What is my secret code?"
	say "grep -c '\"kind\":\"compaction\"' $dir/sessions/c.jsonl"
	grep -c '"kind":"compaction"' "$dir/sessions/c.jsonl"
	;;
queue)
	# Two messages to one session, the second while the first streams: it
	# joins the run in flight and is answered in it.
	fake --latency 30ms
	key=ak_demo_queue_key
	cat >"$dir/agentic.yaml" <<EOF
listen: 127.0.0.1:0
storage: $store
model: {base_url: "$FAKE_URL"}
tenants:
  demo:
    keys: ["$("$BIN" keys hash "$key")"]
    models: [fake/echo]
EOF
	OPENROUTER_API_KEY=unused "$BIN" serve --config "$dir/agentic.yaml" >"$dir/serve.log" 2>&1 &
	pids+=($!)
	for _ in $(seq 100); do
		url=$(sed -n 's/.*listening on \(http[^ ]*\).*/\1/p' "$dir/serve.log")
		[ -n "$url" ] && break
		sleep 0.05
	done
	long=$(seq -s ' ' 1 60)
	run curl -s -H "Authorization: Bearer $key" -d "{\"text\":\"count: $long\"}" "$url/v1/sessions/q/messages"
	sleep 0.5
	run curl -s -H "Authorization: Bearer $key" -d '{"text":"and one more thing"}' "$url/v1/sessions/q/messages?wait=true"
	run curl -s -H "Authorization: Bearer $key" "$url/v1/sessions/q/transcript"
	echo
	;;
task)
	# A task ends with a validated deliverable, a cancellation or a
	# failure — never an error.
	cat >"$dir/title.json" <<'EOF'
{"type":"object","properties":{"title":{"type":"string","minLength":3}},"required":["title"]}
EOF
	run "$BIN" task --offline --storage "$store" --schema "$dir/title.json" \
		--prompt "submit_deliverable title=Durable"
	;;
approval)
	# A tool with an external effect waits for a person: the run parks
	# (exit 3), the inbox lists it, another process approves it, and the
	# run goes on: the post is published once.
	./scripts/plugin-toolchains.sh go >/dev/null
	OUT="$dir/plugins" ./scripts/build-plugins.sh publish_post >/dev/null
	go build -o "$dir/blog" ./internal/demotools/blog
	"$dir/blog" >"$dir/blog.log" 2>&1 &
	pids+=($!)
	for _ in $(seq 100); do
		blog=$(sed -n 's/.*listening on \(http[^ ]*\).*/\1/p' "$dir/blog.log")
		[ -n "$blog" ] && break
		sleep 0.05
	done
	sandbox=(--plugins "$dir/plugins" --plugin-kv --plugin-allow-host "${blog#http://}" --plugin-allow-private
		--plugin-config "publish_post:endpoint=$blog/api/posts")
	set +e
	run "$BIN" chat --offline "${sandbox[@]}" --storage "$store" --session a \
		"publish_post title=Launch body=Today"
	echo "[exit $?]"
	set -e
	say "$BIN approvals --storage $store"
	"$BIN" approvals --storage "$store" | tee "$dir/inbox.txt"
	id=$(awk 'NR==2 {print $2}' "$dir/inbox.txt")
	run "$BIN" approve --offline "${sandbox[@]}" --storage "$store" a "$id" --reason "looks good"
	say "cat $dir/blog.log"
	cat "$dir/blog.log"
	;;
media)
	# An image and a PDF go with a message, byte for byte, to the model
	# and the ledger.
	printf '\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89' >"$dir/pixel.png"
	printf '%%PDF-1.4\n%% a tiny document\n%%%%EOF\n' >"$dir/notes.pdf"
	run "$BIN" chat --offline --storage "$store" --session m --attach "$dir/pixel.png" --attach "$dir/notes.pdf" \
		"What did I send?"
	;;
beforeafter)
	# The same conversation twice, with a flaky model, a crash after the
	# second question, and a second start: first with the plumbing written
	# by hand (retries, a JSON file, a resume), then on the host.
	go build -o "$dir/byhand" ./examples/beforeafter/byhand
	go build -o "$dir/onhost" ./examples/beforeafter/onhost
	say "wc -l examples/beforeafter/byhand/main.go examples/beforeafter/onhost/main.go"
	wc -l examples/beforeafter/byhand/main.go examples/beforeafter/onhost/main.go
	for prog in byhand onhost; do
		set +e
		run "$dir/$prog" -dir "$dir/$prog.data" -crash-at 2
		echo "[exit $?]"
		set -e
		run "$dir/$prog" -dir "$dir/$prog.data"
	done
	;;
*)
	echo "unknown demo $name (chaos restart compaction queue task approval media beforeafter)" >&2
	exit 2
	;;
esac
