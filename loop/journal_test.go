package loop

import (
	"errors"
	"testing"
	"time"

	"github.com/beanpole/beanpole/engine"
	"github.com/beanpole/beanpole/record"
	"github.com/rs/zerolog"
)

// instantFailLog acknowledges every record with a write error before the
// append returns: the fastest a failing log can answer.
type instantFailLog struct{}

var errEIO = errors.New("EIO")

func (instantFailLog) Put(_ *record.Job, a record.Ack) error { a.Durable(errEIO); return nil }
func (instantFailLog) Delete(_ uint64, a record.Ack) error   { a.Durable(errEIO); return nil }
func (instantFailLog) Release(_ uint64, _ uint32, _ time.Duration, _ int64, _ record.Counters, a record.Ack) error {
	a.Durable(errEIO)
	return nil
}
func (instantFailLog) Bury(_ uint64, _ uint32, _ uint64, _ record.Counters, a record.Ack) error {
	a.Durable(errEIO)
	return nil
}
func (instantFailLog) Kick(_ uint64, _ record.Counters, a record.Ack) error {
	a.Durable(errEIO)
	return nil
}
func (instantFailLog) Rewrite(*record.Job) error { return nil }
func (instantFailLog) FileOf(uint64) uint64      { return 0 }

// A put whose record fails is answered INTERNAL_ERROR even when the
// failure is known before the loop looks at the reply (it once slipped
// through as INSERTED when the ack beat the loop).
func TestFailedRecordAckedAtOnceIsNeverInserted(t *testing.T) {
	eng := engine.New(1)
	eng.SetJournal(instantFailLog{})
	srv, err := New(Config{Loops: 1, MaxJobSize: 65535, Version: "test", Log: zerolog.Nop()}, eng)
	if err != nil {
		t.Fatal(err)
	}
	c := dial(t, serve(t, srv))
	send(t, c, "put 0 0 10 1\r\nx\r\nlist-tube-used\r\npeek 1\r\n")
	expect(t, c, "INTERNAL_ERROR\r\nUSING default\r\nNOT_FOUND\r\n")
}
