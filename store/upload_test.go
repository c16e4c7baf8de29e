package store

import (
	"errors"
	"reflect"
	"testing"
	"time"
)

func TestUploadStateRoundTrip(t *testing.T) {
	dir := t.TempDir()
	db, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	const target, table = "s3://b/p/site", "public.items"

	// Nothing recorded yet: a fresh state, readable in a read transaction
	// before the upload bucket exists.
	err = db.View(func(r *Reader) error {
		s, err := r.UploadState(target, table)
		if err != nil {
			return err
		}
		if s.RemoteVersion != -1 || s.CheckpointVersion != -1 || s.Stopped != "" {
			t.Errorf("fresh state = %+v", s)
		}
		if _, ok, err := r.UploadedFile(target, table, "a.parquet"); ok || err != nil {
			t.Errorf("UploadedFile on empty state = %v, %v", ok, err)
		}
		m, err := r.Multipart(target, table, "a.parquet")
		if m != nil || err != nil {
			t.Errorf("Multipart on empty state = %v, %v", m, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	now := time.UnixMicro(time.Now().UnixMicro()).UTC()
	st := UploadState{RemoteVersion: 12, CheckpointVersion: 10, Stopped: "conflict", LastSuccess: now}
	file := UploadedFile{Path: "d=1/part-1.parquet", Size: 1234, Version: 7, UploadedAt: now}
	mp := &MultipartUpload{Path: "big.parquet", UploadID: "upl-1", Size: 12 << 20, PartSize: 5 << 20,
		Parts: []UploadedPart{{Number: 1, ETag: "e1", Size: 5 << 20}, {Number: 2, ETag: "e2", Size: 5 << 20}}}
	err = db.Update(func(w *Writer) error {
		if err := w.PutUploadState(target, table, st); err != nil {
			return err
		}
		if err := w.PutUploadedFile(target, table, file); err != nil {
			return err
		}
		return w.PutMultipart(target, table, mp)
	})
	if err != nil {
		t.Fatal(err)
	}
	// Survives a reopen.
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.View(func(r *Reader) error {
		s, err := r.UploadState(target, table)
		if err != nil {
			return err
		}
		if !reflect.DeepEqual(s, st) {
			t.Errorf("state = %+v, want %+v", s, st)
		}
		f, ok, err := r.UploadedFile(target, table, file.Path)
		if err != nil || !ok || !reflect.DeepEqual(f, file) {
			t.Errorf("file = %+v %v %v, want %+v", f, ok, err, file)
		}
		var n int
		if err := r.UploadedFiles(target, table, func(UploadedFile) error { n++; return nil }); err != nil || n != 1 {
			t.Errorf("UploadedFiles: %d files, %v", n, err)
		}
		m, err := r.Multipart(target, table, mp.Path)
		if err != nil || !reflect.DeepEqual(m, mp) {
			t.Errorf("multipart = %+v %v, want %+v", m, err, mp)
		}
		names, err := r.UploadTables(target)
		if err != nil || !reflect.DeepEqual(names, []string{table}) {
			t.Errorf("tables = %v %v", names, err)
		}
		// Another target has its own state.
		other, err := r.UploadState("file:///elsewhere", table)
		if err != nil || other.RemoteVersion != -1 {
			t.Errorf("other target state = %+v %v", other, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	err = db.Update(func(w *Writer) error {
		if err := w.DeleteMultipart(target, table, mp.Path); err != nil {
			return err
		}
		return w.DeleteUploadState(target, table)
	})
	if err != nil {
		t.Fatal(err)
	}
	err = db.View(func(r *Reader) error {
		s, err := r.UploadState(target, table)
		if err != nil || s.RemoteVersion != -1 {
			t.Errorf("after delete: %+v %v", s, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestUploadStateCorruptionIsDetected(t *testing.T) {
	db, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(w *Writer) error {
		if err := w.PutUploadState("t", "x", UploadState{RemoteVersion: 3}); err != nil {
			return err
		}
		b, err := w.uploadTableRW("t", "x")
		if err != nil {
			return err
		}
		v := append([]byte(nil), b.Get(keyUploadState)...)
		v[3] ^= 0xff
		return b.Put(keyUploadState, v)
	})
	if err != nil {
		t.Fatal(err)
	}
	err = db.View(func(r *Reader) error {
		_, err := r.UploadState("t", "x")
		return err
	})
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("err = %v, want ErrCorrupt", err)
	}
}

// TestRemoteDeletes checks that pending remote deletes survive a reopen and
// that RemoteDeleted forgets the delete and the upload record together.
func TestRemoteDeletes(t *testing.T) {
	dir := t.TempDir()
	db, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	const target, table = "file:///r/site", "public.items"
	at := time.Date(2024, 3, 1, 0, 0, 0, 0, time.UTC)
	want := []RemoteDelete{
		{Path: "a.parquet", Size: 10, AfterVersion: 4, PlannedAt: at},
		{Path: "p=1/b.parquet", Size: 20, AfterVersion: 5, PlannedAt: at},
	}
	err = db.Update(func(w *Writer) error {
		for _, d := range want {
			if err := w.PutUploadedFile(target, table, UploadedFile{Path: d.Path, Size: d.Size, Version: 1, UploadedAt: at}); err != nil {
				return err
			}
			if err := w.PutRemoteDelete(target, table, d); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	if db, err = Open(dir, Options{}); err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	list := func() []RemoteDelete {
		var got []RemoteDelete
		if err := db.View(func(r *Reader) error {
			return r.RemoteDeletes(target, table, func(d RemoteDelete) error {
				got = append(got, d)
				return nil
			})
		}); err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := list(); !reflect.DeepEqual(got, want) {
		t.Fatalf("after reopen: %+v, want %+v", got, want)
	}
	if err := db.Update(func(w *Writer) error { return w.RemoteDeleted(target, table, "a.parquet") }); err != nil {
		t.Fatal(err)
	}
	if got := list(); !reflect.DeepEqual(got, want[1:]) {
		t.Fatalf("after RemoteDeleted: %+v, want %+v", got, want[1:])
	}
	err = db.View(func(r *Reader) error {
		if _, ok, err := r.UploadedFile(target, table, "a.parquet"); ok || err != nil {
			t.Errorf("upload record of a deleted file: %v, %v", ok, err)
		}
		return r.RemoteDeletes("other", table, func(RemoteDelete) error { return errors.New("unexpected") })
	})
	if err != nil {
		t.Fatal(err)
	}
}
