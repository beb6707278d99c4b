package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"

	"github.com/beanpole/beanpole/record"
)

// BenchmarkIdleGroups measures what an idle raft group costs each node
// that holds a replica of it: three nodes on loopback, each hosting
// groups groups on one raft port (hostGroups), every group with a leader
// that confirms its lease as one serving clients does (AwaitLeadership),
// and nothing written. One iteration is one second of idleness; the
// figures are per group replica:
//
//	go test -run '^$' -bench IdleGroups -benchtime 10x ./cluster/
//
// %core is CPU time (user and system, the whole process) over wall time,
// appends/s the raft log writes (raft-wal syncs the log once per write).
func BenchmarkIdleGroups(b *testing.B) {
	for _, groups := range []int{1, 16, 48} {
		b.Run(fmt.Sprintf("groups=%d", groups), func(b *testing.B) {
			_, gs := hostGroups(b, 3, groups, nil)
			for _, nodes := range gs {
				(&group{t: b, nodes: nodes}).leader()
			}
			last := func() (n uint64) {
				for _, nodes := range gs {
					for _, nd := range nodes {
						n += nd.Raft.LastIndex()
					}
				}
				return n
			}
			time.Sleep(time.Second) // elections and first appends settle
			startIdx, startCPU, start := last(), cpuTime(), time.Now()
			b.ResetTimer()
			for range b.N {
				time.Sleep(time.Second)
			}
			b.StopTimer()
			wall := time.Since(start)
			replicas := float64(3 * groups)
			b.ReportMetric(100*float64(cpuTime()-startCPU)/float64(wall)/replicas, "%core/replica")
			b.ReportMetric(float64(last()-startIdx)/wall.Seconds()/replicas, "appends/s/replica")
			b.ReportMetric(0, "ns/op")
		})
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkBusyGroups measures whether groups that each write their own
// raft log scale on one disk: three nodes on loopback, each hosting
// groups groups on one raft port, and a writer per group that keeps
// window puts in flight on its leader's journal. One iteration is one
// second of writing; the figures are for all groups together:
//
//	go test -run '^$' -bench BusyGroups -benchtime 5x ./cluster/
//
// records/s are acknowledged puts, entries/s the raft entries that held
// them (each is one fsync on the leader and one on each follower).
func BenchmarkBusyGroups(b *testing.B) {
	const window = 64
	for _, groups := range []int{1, 3, 6} {
		b.Run(fmt.Sprintf("groups=%d", groups), func(b *testing.B) {
			_, gs := hostGroups(b, 3, groups, nil)
			var acked atomic.Int64
			stop := make(chan struct{})
			var wg sync.WaitGroup
			var leaders []*Node
			for g, nodes := range gs {
				nd, jl := (&group{t: b, nodes: nodes}).leader()
				leaders = append(leaders, nd)
				wg.Add(1)
				go func() {
					defer wg.Done()
					slots := make(chan struct{}, window)
					for id := uint64(1); ; id++ {
						select {
						case <-stop:
							return
						case slots <- struct{}{}:
						}
						j := job(id)
						j.Tube = fmt.Sprintf("g%d", g)
						if jl.Put(j, record.AckFunc(func(error) { acked.Add(1); <-slots })) != nil {
							return
						}
					}
				}()
			}
			defer func() { close(stop); wg.Wait() }()
			entries := func() (n uint64) {
				for _, nd := range leaders {
					n += nd.Raft.LastIndex()
				}
				return n
			}
			time.Sleep(time.Second) // warm up
			startAcks, startIdx, start := acked.Load(), entries(), time.Now()
			b.ResetTimer()
			for range b.N {
				time.Sleep(time.Second)
			}
			b.StopTimer()
			wall := time.Since(start).Seconds()
			b.ReportMetric(float64(acked.Load()-startAcks)/wall, "records/s")
			b.ReportMetric(float64(entries()-startIdx)/wall, "entries/s")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// BenchmarkGroupLogSyncs measures whether the raft-wal logs of groups on
// one disk sync in parallel: groups logs in one directory tree, a writer
// per log appending one small entry per write, each write synced before
// the next as raft's are. One iteration is one second; the figure is the
// writes of all logs together:
//
//	go test -run '^$' -bench GroupLogSyncs -benchtime 3x ./cluster/
//
// Flat from 1 to 6 logs would mean each log's syncs wait for the others'
// and groups need one log shared between them; rising means the disk
// joins concurrent syncs and a log per group costs nothing in fsyncs.
func BenchmarkGroupLogSyncs(b *testing.B) {
	for _, groups := range []int{1, 3, 6} {
		b.Run(fmt.Sprintf("groups=%d", groups), func(b *testing.B) {
			dir := b.TempDir()
			var writes atomic.Int64
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for g := range groups {
				d := filepath.Join(dir, fmt.Sprint(g))
				if err := os.Mkdir(d, 0o700); err != nil {
					b.Fatal(err)
				}
				w, err := wal.Open(d)
				if err != nil {
					b.Fatal(err)
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer w.Close()
					data := make([]byte, 128)
					for i := uint64(1); ; i++ {
						select {
						case <-stop:
							return
						default:
						}
						if err := w.StoreLog(&raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: data}); err != nil {
							b.Error(err)
							return
						}
						writes.Add(1)
					}
				}()
			}
			defer func() { close(stop); wg.Wait() }()
			start, from := time.Now(), writes.Load()
			b.ResetTimer()
			for range b.N {
				time.Sleep(time.Second)
			}
			b.StopTimer()
			b.ReportMetric(float64(writes.Load()-from)/time.Since(start).Seconds(), "syncs/s")
			b.ReportMetric(0, "ns/op")
		})
	}
}
