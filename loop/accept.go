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
// off before trying again.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	s.listeners = append(s.listeners, ln)
	s.acceptWG.Add(1)
	s.mu.Unlock()
	defer s.acceptWG.Done()

	spare, _ := os.Open(os.DevNull)
	var backoff time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.stopping.Load() || errors.Is(err, net.ErrClosed) {
				if spare != nil {
					spare.Close()
				}
				return nil
			}
			if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
				if backoff == 0 {
					s.log.Warn().Err(err).Msg("out of file descriptors: refusing new connections until some close")
				}
				if spare != nil {
					spare.Close()
					if c, err := ln.Accept(); err == nil {
						c.Close()
					}
					spare, _ = os.Open(os.DevNull)
				}
			} else {
				s.log.Error().Err(err).Msg("accept failed")
			}
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			time.Sleep(backoff)
			continue
		}
		if backoff != 0 {
			s.log.Info().Msg("accepting connections again")
			backoff = 0
		}
		if _, err := s.cli.EnrollContext(nc, nil); err != nil {
			s.log.Warn().Err(err).Msg("could not register connection")
		}
	}
}
