package persist

import (
	"fmt"
	"os"

	"github.com/rs/zerolog"
)

// checkArchive refuses, before anything is decided, to move a file into
// the archive where one of the same name already is (left there by an
// earlier import).
func checkArchive(dir string, seqs []uint64) error {
	for _, seq := range seqs {
		if to := join(join(dir, importArchive), segName(seq)); exists(to) {
			return fmt.Errorf("%w: binlog import: %s already exists (an earlier import's?); move it elsewhere to import %s",
				ErrFormat, to, join(dir, segName(seq)))
		}
	}
	return nil
}

// writeMarker decides the import (step 2): once the marker is durable the
// new log is the one that counts.
func writeMarker(fsys FS, staging string) error {
	f, err := fsys.OpenFile(join(staging, importMarker), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, filePerm)
	if err == nil {
		err = f.Sync()
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err == nil {
		err = fsys.SyncDir(staging)
	}
	return importErr(err)
}

// finishImport does steps 3 to 5 of a decided import. Every step may have
// been done in part or in full by an earlier run, and is finished here.
func finishImport(fsys FS, dir string, log zerolog.Logger) error {
	staging, archive := join(dir, importStaging), join(dir, importArchive)
	files, err := classify(fsys, dir)
	if err != nil {
		return err
	}
	// Step 3, unless step 4 has begun: it moves the new log's binlog.1
	// first, so a segment of beanpole's in DIR means step 3 is done. DIR
	// never holds both logs.
	if files.ours == "" {
		set := files.aside()
		if err := os.MkdirAll(archive, 0o700); err != nil {
			return importErr(err)
		}
		if err := checkArchive(dir, set); err != nil {
			return err
		}
		if err := moveSegments(fsys, dir, archive, set, "archiving"); err != nil {
			return err
		}
		if err := fsys.SyncDir(archive); err != nil {
			return importErr(err)
		}
		if err := fsys.SyncDir(dir); err != nil {
			return importErr(err)
		}
		if len(set) > 0 {
			log.Debug().Int("files", len(set)).Str("to", archive).Msg("binlog: upstream beanstalkd's binlog moved aside")
		}
	}
	crashPoint("archived")
	// Step 4, lowest N first.
	staged, err := listSegments(fsys, staging)
	if err != nil {
		return importErr(err)
	}
	if err := moveSegments(fsys, staging, dir, staged, "installing"); err != nil {
		return err
	}
	if err := fsys.SyncDir(dir); err != nil {
		return importErr(err)
	}
	crashPoint("installed")
	// Step 5: the marker goes last, so that a removal cut short either
	// is finished by the next start or leaves nothing it needs.
	rest, err := fsys.ReadDir(staging)
	if err != nil {
		return importErr(err)
	}
	for _, n := range rest {
		if n != importMarker {
			if err := os.RemoveAll(join(staging, n)); err != nil {
				return importErr(err)
			}
		}
	}
	if err := fsys.SyncDir(staging); err != nil {
		return importErr(err)
	}
	if err := fsys.Remove(join(staging, importMarker)); err != nil {
		return importErr(err)
	}
	if err := fsys.Remove(staging); err != nil {
		return importErr(err)
	}
	return importErr(fsys.SyncDir(dir))
}

// moveSegments renames binlog.N for each N of seqs, in order, from one
// directory to another; the crash tests may stop it after each rename.
func moveSegments(fsys FS, from, to string, seqs []uint64, step string) error {
	for _, seq := range seqs {
		if err := fsys.Rename(join(from, segName(seq)), join(to, segName(seq))); err != nil {
			return importErr(err)
		}
		crashPoint(step)
	}
	return nil
}
