// Copyright (c) 2023 The Gnet Authors. All rights reserved.
//
// Licensed under the Apache License, Version 2.0 (the "License");
// you may not use this file except in compliance with the License.
// You may obtain a copy of the License at
//
//      http://www.apache.org/licenses/LICENSE-2.0
//
// Unless required by applicable law or agreed to in writing, software
// distributed under the License is distributed on an "AS IS" BASIS,
// WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
// See the License for the specific language governing permissions and
// limitations under the License.

//go:build (darwin || dragonfly || freebsd || linux || netbsd || openbsd) && !gc_opt

package gnet

import (
	"sync"
	"sync/atomic"

	"github.com/panjf2000/gnet/v2/internal/gfd"
)

// Patched (see PATCHES.md): the connections of every event loop live in one
// process-wide table indexed by descriptor, 8 bytes a descriptor, instead of
// a Go map per loop (about 30 bytes a connection). A descriptor number names
// one open socket in the whole process, so at most one loop's connection
// holds a slot at a time; a loop only sees the connections that are its own
// (getConn checks the owner), so an event for a number that another loop has
// reused meanwhile is still a stale one, as it was with per-loop maps.
//
// Slots are read and written atomically: a number freed by one loop can be
// taken by a connection of another at once. delConn clears a slot only if it
// still holds that connection.
const (
	fdChunkBits = 10
	fdChunkSize = 1 << fdChunkBits
	fdChunks    = 1 << 10 // descriptors below 1<<20 use the table
)

type fdChunk [fdChunkSize]atomic.Pointer[conn]

var fdTable struct {
	chunks [fdChunks]atomic.Pointer[fdChunk] // allocated on first use
	mu     sync.Mutex
	high   map[int]*conn // descriptors from fdChunkSize*fdChunks up, rare
}

// fdSlot is fd's slot, its chunk allocated first if create is set; nil if
// the chunk does not exist yet. inTable is false for a descriptor beyond
// the table, which lives in fdTable.high.
func fdSlot(fd int, create bool) (slot *atomic.Pointer[conn], inTable bool) {
	i := fd >> fdChunkBits
	if fd < 0 || i >= fdChunks {
		return nil, false
	}
	ch := fdTable.chunks[i].Load()
	if ch == nil {
		if !create {
			return nil, true
		}
		fdTable.chunks[i].CompareAndSwap(nil, new(fdChunk))
		ch = fdTable.chunks[i].Load()
	}
	return &ch[fd&(fdChunkSize-1)], true
}

type connMatrix struct {
	connCount int32
}

func (cm *connMatrix) init() {}

// owns reports whether c belongs to the loop whose table view cm is.
func (cm *connMatrix) owns(c *conn) bool {
	return c != nil && c.loop != nil && &c.loop.connections == cm
}

func (cm *connMatrix) iterate(f func(*conn) bool) {
	for i := range fdTable.chunks {
		ch := fdTable.chunks[i].Load()
		if ch == nil {
			continue
		}
		for j := range ch {
			if c := ch[j].Load(); cm.owns(c) && !f(c) {
				return
			}
		}
	}
	fdTable.mu.Lock()
	var high []*conn
	for _, c := range fdTable.high {
		if cm.owns(c) {
			high = append(high, c)
		}
	}
	fdTable.mu.Unlock()
	for _, c := range high { // f may delete: call it unlocked
		if !f(c) {
			return
		}
	}
}

func (cm *connMatrix) incCount(_ int, delta int32) {
	atomic.AddInt32(&cm.connCount, delta)
}

func (cm *connMatrix) loadCount() (n int32) {
	return atomic.LoadInt32(&cm.connCount)
}

func (cm *connMatrix) addConn(c *conn, index int) {
	c.gfd = gfd.NewGFD(c.fd, index, 0, 0)
	if s, inTable := fdSlot(c.fd, true); inTable {
		s.Store(c)
	} else {
		fdTable.mu.Lock()
		if fdTable.high == nil {
			fdTable.high = make(map[int]*conn)
		}
		fdTable.high[c.fd] = c
		fdTable.mu.Unlock()
	}
	cm.incCount(0, 1)
}

func (cm *connMatrix) delConn(c *conn) {
	if s, inTable := fdSlot(c.fd, false); inTable {
		if s != nil {
			s.CompareAndSwap(c, nil)
		}
	} else {
		fdTable.mu.Lock()
		if fdTable.high[c.fd] == c {
			delete(fdTable.high, c.fd)
		}
		fdTable.mu.Unlock()
	}
	cm.incCount(0, -1)
}

func (cm *connMatrix) getConn(fd int) *conn {
	var c *conn
	if s, inTable := fdSlot(fd, false); s != nil {
		c = s.Load()
	} else if !inTable {
		fdTable.mu.Lock()
		c = fdTable.high[fd]
		fdTable.mu.Unlock()
	}
	if !cm.owns(c) {
		return nil
	}
	return c
}

/*
func (cm *connMatrix) getConnByGFD(fd gfd.GFD) *conn {
	return cm.connMap[fd.Fd()]
}
*/
