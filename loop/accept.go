package loop

import (
	"errors"
	"net"
	"os"
	"syscall"
	"time"
)

// Serve accepts connections from ln until Stop and hands each to an event
// loop. It returns when ln is closed.
//
// Running out of descriptors must neither spin nor leave clients hanging
// in the backlog (upstream #351, #361, #628, #651): on EMFILE/ENFILE we
// give up a spare descriptor, accept the waiting connection and close it
// at once, so the client gets a clean close instead of a hang, then back
// off before trying again. The condition is logged once per episode.
//
// With Config.ReserveFDs (-b), a connection is also shed while the
// process is within that many descriptors of its limit, before it is
// enrolled (reserve.go): the binlog must never fail to open a segment
// because clients took every descriptor.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	s.listeners = append(s.listeners, ln)
	s.acceptWG.Add(1)
	s.mu.Unlock()
	defer s.acceptWG.Done()

	a := acceptor{s: s, ln: ln}
	a.spare, _ = os.Open(os.DevNull)
	defer func() {
		if a.spare != nil {
			a.spare.Close()
		}
	}()
	for {
		if a.spare == nil {
			a.spare, _ = os.Open(os.DevNull)
		}
		nc, err := ln.Accept()
		if err != nil {
			if s.stopping.Load() || errors.Is(err, net.ErrClosed) {
				return nil
			}
			a.failed(err, true)
			continue
		}
		if s.cfg.ReserveFDs > 0 && a.reserveShort(nc) {
			continue
		}
		// EnrollContext dups the descriptor, which can fail at the limit
		// too; it closes nc either way, so that client is answered already.
		if _, err := s.cli.EnrollContext(nc, nil); err != nil {
			a.failed(err, false)
			continue
		}
		if a.backoff != 0 || a.shedding {
			s.log.Warn().Msg("accepting connections again")
			a.backoff, a.shedding = 0, false
		}
	}
}

type acceptor struct {
	s        *Server
	ln       net.Listener
	spare    *os.File
	backoff  time.Duration
	shedding bool // shedding to keep descriptors in reserve (reserve.go)
}

func (a *acceptor) failed(err error, shed bool) {
	if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
		if a.backoff == 0 {
			a.s.log.Warn().Err(err).Msg("out of file descriptors: closing new connections until some are free")
		}
		if shed {
			a.shed()
		}
	} else if a.backoff == 0 {
		a.s.log.Error().Err(err).Msg("accept failed")
	}
	a.backoff = min(max(2*a.backoff, 5*time.Millisecond), 200*time.Millisecond)
	time.Sleep(a.backoff)
}

// shed closes one client that is already waiting in the backlog, using the
// spare descriptor for it. Linux's accept4 reports EMFILE even when nobody
// is waiting, so the accept here must not block: it would take the slot of
// the next client that could have been served.
func (a *acceptor) shed() {
	dl, ok := a.ln.(interface{ SetDeadline(time.Time) error })
	if a.spare == nil || !ok {
		return
	}
	a.spare.Close()
	a.spare = nil
	// Not time.Now(): Go checks an expired deadline before it even calls
	// accept4, so that would never take the waiting client.
	if dl.SetDeadline(time.Now().Add(time.Millisecond)) == nil {
		if c, err := a.ln.Accept(); err == nil {
			c.Close()
		}
		_ = dl.SetDeadline(time.Time{})
	}
	a.spare, _ = os.Open(os.DevNull)
}
