package loop

import "github.com/rs/zerolog"

// gnetLogger routes gnet's own log lines through zerolog. Its debug and
// info lines (event loops starting and exiting) are at trace level: -VV.
type gnetLogger struct{ l zerolog.Logger }

func (g gnetLogger) Debugf(f string, a ...any) { g.l.Trace().Msgf(f, a...) }
func (g gnetLogger) Infof(f string, a ...any)  { g.l.Trace().Msgf(f, a...) }
func (g gnetLogger) Warnf(f string, a ...any)  { g.l.Warn().Msgf(f, a...) }
func (g gnetLogger) Errorf(f string, a ...any) { g.l.Error().Msgf(f, a...) }
func (g gnetLogger) Fatalf(f string, a ...any) { g.l.Error().Bool("fatal", true).Msgf(f, a...) }
