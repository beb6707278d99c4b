// Command scrapeload is the load of the scrape-cost measurement
// (bench/scrape-cost.sh): it makes -tubes tubes on a fresh beanpole by
// watching them (no jobs, so the benchmark's own checks of total-jobs
// hold), then, with -every, reads its /metrics over and over (back to back
// with -every 0) until the server is gone, and prints how long each
// scrape took.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"
)

func main() {
	port := flag.Int("port", 0, "the server's protocol port")
	httpAddr := flag.String("http", "", "the server's --http address")
	tubes := flag.Int("tubes", 10000, "tubes to make (watched by one connection)")
	every := flag.Duration("every", -1, "scrape period (0: back to back; negative: never)")
	flag.Parse()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(*port))
	var c net.Conn
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var err error
		if c, err = net.Dial("tcp", addr); err == nil {
			break
		}
		if time.Now().After(deadline) {
			fmt.Fprintln(os.Stderr, "scrapeload: no server:", err)
			os.Exit(1)
		}
	}
	w := bufio.NewWriterSize(c, 1<<16)
	for i := range *tubes {
		fmt.Fprintf(w, "watch scrape-%d\r\n", i)
	}
	w.Flush()
	r := bufio.NewReader(c)
	for range *tubes {
		if _, err := r.ReadString('\n'); err != nil {
			fmt.Fprintln(os.Stderr, "scrapeload:", err)
			os.Exit(1)
		}
	}
	if *every < 0 {
		_, _ = io.Copy(io.Discard, c) // until the server is gone
		return
	}
	// One line a scrape, as it ends: the benchmark kills this process
	// with its server.
	for {
		start := time.Now()
		resp, err := http.Get("http://" + *httpAddr + "/metrics")
		if err != nil {
			return
		}
		n, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil {
			return
		}
		fmt.Fprintf(os.Stderr, "scrape %.1f ms %d bytes\n", float64(time.Since(start).Microseconds())/1000, n)
		time.Sleep(*every)
	}
}
