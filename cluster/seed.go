package cluster

import (
	"fmt"
	"time"

	"github.com/beanpole/beanpole/record"
)

// seedEntryBytes is the size at which Seed cuts its entries.
const seedEntryBytes = 1 << 20

// Seed replicates jobs (from a binlog) into an empty group, as full
// records in entries of about seedEntryBytes, and an id mark for maxID so
// that ids go on above every id the binlog handed out. It runs on the
// leader before it serves anyone; full records replace a job by id, so a
// seed cut short and run again gives the same state. It refuses a group
// that already holds jobs or ids.
func (n *Node) Seed(jobs []*record.Job, maxID uint64) error {
	if _, top := n.FSM.State(); top != 0 {
		return fmt.Errorf("cluster: the group already holds jobs (ids up to %d): a binlog can only seed an empty one", top)
	}
	apply := func(entry []byte) error {
		return n.Raft.Apply(entry, time.Minute).Error()
	}
	entry := []byte{entryRecords}
	for _, j := range jobs {
		if len(entry) > seedEntryBytes {
			if err := apply(entry); err != nil {
				return fmt.Errorf("cluster: seeding: %w", err)
			}
			entry = []byte{entryRecords}
		}
		entry = appendFramed(entry, record.AppendFull(nil, j))
	}
	entry = appendFramed(entry, record.AppendHighWater(nil, maxID))
	if err := apply(entry); err != nil {
		return fmt.Errorf("cluster: seeding: %w", err)
	}
	return nil
}
