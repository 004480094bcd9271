// Command blog is the stand-in blog of the approval demo
// (scripts/demo.sh approval): it answers POST /api/posts as a blog's API
// would, prints each post it gets, and listens on 127.0.0.1 (port 0 picks
// one, printed on the first line).
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"sync/atomic"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "listen `ADDR`")
	flag.Parse()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("blog listening on http://%s\n", ln.Addr())
	var posts atomic.Int64
	http.HandleFunc("POST /api/posts", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		n := posts.Add(1)
		fmt.Printf("blog: post %d published: %s\n", n, body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":"post-%d","url":"https://blog.example/p/%d"}`, n, n)
	})
	log.Fatal(http.Serve(ln, nil))
}
