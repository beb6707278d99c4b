package loop

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"syscall"

	"github.com/beanpole/beanpole/codec"
	"golang.org/x/sys/unix"
)

// serverInfo is the part of `stats` fixed for the life of the process.
type serverInfo struct {
	pid                    int
	version                string
	id                     string // 8 random bytes in hex, as upstream
	hostname, os, platform string // uname nodename, version, machine
}

func newServerInfo(version string) serverInfo {
	var b [8]byte
	_, _ = rand.Read(b[:])
	si := serverInfo{pid: os.Getpid(), version: version, id: hex.EncodeToString(b[:])}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		si.hostname = unix.ByteSliceToString(u.Nodename[:])
		si.os = unix.ByteSliceToString(u.Version[:])
		si.platform = unix.ByteSliceToString(u.Machine[:])
	}
	return si
}

// BinlogStats lets the persistence layer fill the binlog-* fields.
type BinlogStats func(st *codec.ServerStats)

// Stats assembles what `stats` reports; any goroutine may call it.
func (s *Server) Stats(st *codec.ServerStats) {
	s.eng.Stats(st)
	s.mu.Lock()
	for _, ls := range s.loops {
		for op := range ls.cmd {
			st.Cmd[op] += ls.cmd[op].Load()
		}
	}
	s.mu.Unlock()
	st.MaxJobSize = uint64(s.cfg.MaxJobSize)
	st.PID = s.info.pid
	st.Version = s.info.version
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		st.RusageUtimeSec, st.RusageUtimeUsec = ru.Utime.Sec, ru.Utime.Usec
		st.RusageStimeSec, st.RusageStimeUsec = ru.Stime.Sec, ru.Stime.Usec
	}
	st.Uptime = uint64(s.eng.Uptime().Seconds())
	st.BinlogMaxSize = 10485760 // upstream reports the -s default even without -b
	if s.Binlog != nil {
		s.Binlog(st)
	}
	st.BinlogFailed = st.BinlogFailed || s.eng.LogFailure() != ""
	st.ID, st.Hostname, st.OS, st.Platform = s.info.id, s.info.hostname, s.info.os, s.info.platform
}
