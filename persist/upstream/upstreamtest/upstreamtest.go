// Package upstreamtest writes records of upstream beanstalkd's binlog the
// way beanstalkd does, for tests of the packages that read them.
package upstreamtest

import (
	"encoding/binary"
	"time"
)

// States as upstream stores them.
const (
	Deleted  uint8 = 0
	Ready    uint8 = 1
	Reserved uint8 = 2
	Buried   uint8 = 3
	Delayed  uint8 = 4
)

// Record is one record: a full one when Tube is set, an update otherwise.
type Record struct {
	ID                                          uint64
	Tube                                        string
	Pri                                         uint32
	State                                       uint8
	Delay, TTR                                  time.Duration
	Created, Deadline                           int64 // wall-clock Unix ns
	Reserves, Timeouts, Releases, Buries, Kicks uint32
	Body                                        string // CRLF included
}

// Created is the creation time Put gives: 2026-01-01T00:00:00Z.
const Created = 1767225600e9

// Put is the full record of a job put into tube, ready, with a TTR of a
// minute.
func Put(id uint64, tube, body string) Record {
	return Record{ID: id, Tube: tube, State: Ready, TTR: time.Minute, Created: Created, Body: body}
}

// Update is r as an update record in state.
func (r Record) Update(state uint8) Record {
	r.Tube, r.Body, r.State = "", "", state
	return r
}

// Encode writes r as version (5 or 7) lays it out: namelen (int32, or
// size_t in version 5), tube name, job struct (80 bytes with its padding,
// or 77), body. Version 5 stores times in microseconds.
func (r Record) Encode(version int) []byte {
	le := binary.LittleEndian
	var b []byte
	size, unit := 80, time.Nanosecond
	if version == 5 {
		b = le.AppendUint64(b, uint64(len(r.Tube)))
		size, unit = 77, time.Microsecond
	} else {
		b = le.AppendUint32(b, uint32(len(r.Tube)))
	}
	b = append(b, r.Tube...)
	j := make([]byte, size)
	le.PutUint64(j[0:], r.ID)
	le.PutUint32(j[8:], r.Pri)
	le.PutUint64(j[16:], uint64(r.Delay/unit))
	le.PutUint64(j[24:], uint64(r.TTR/unit))
	le.PutUint32(j[32:], uint32(len(r.Body)))
	le.PutUint64(j[40:], uint64(r.Created/int64(unit)))
	le.PutUint64(j[48:], uint64(r.Deadline/int64(unit)))
	le.PutUint32(j[56:], r.Reserves)
	le.PutUint32(j[60:], r.Timeouts)
	le.PutUint32(j[64:], r.Releases)
	le.PutUint32(j[68:], r.Buries)
	le.PutUint32(j[72:], r.Kicks)
	j[76] = r.State
	b = append(b, j...)
	return append(b, r.Body...)
}

// File is a binlog file of version holding recs, then pad zero bytes of
// preallocation.
func File(version, pad int, recs ...Record) []byte {
	b := binary.LittleEndian.AppendUint32(nil, uint32(version))
	for _, r := range recs {
		b = append(b, r.Encode(version)...)
	}
	return append(b, make([]byte, pad)...)
}
