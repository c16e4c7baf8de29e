package uploader

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// LayoutMarker is the object at the root of a replica URL that says which
// layout the replica holds (Config.Layout). The first agent to write to a
// replica puts it, with If-None-Match, and every agent checks it before it
// writes anything else, so that site tables and fleet tables never mix
// under one URL.
const LayoutMarker = "_lakeside_layout.json"

// ErrLayoutMismatch is returned when the replica holds another layout than
// the one configured.
var ErrLayoutMismatch = errors.New("the replica holds another layout")

// layoutMarker is the content of LayoutMarker.
type layoutMarker struct {
	Layout string `json:"layout"`
}

// ReadLayout returns the layout the replica whose root client is root
// holds, or "" when no agent claimed one yet.
func ReadLayout(ctx context.Context, root ReplicaClient) (string, error) {
	rc, err := root.GetObject(ctx, LayoutMarker)
	if errors.Is(err, ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read %s: %w", LayoutMarker, err)
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, 4096))
	if err != nil {
		return "", fmt.Errorf("read %s: %w", LayoutMarker, err)
	}
	var m layoutMarker
	if err := json.Unmarshal(data, &m); err != nil || (m.Layout != LayoutSite && m.Layout != LayoutFleet) {
		return "", fmt.Errorf("read %s: not a layout marker: %q", LayoutMarker, data)
	}
	return m.Layout, nil
}

// ClaimLayout makes sure the replica whose root client is root holds
// layout: it claims it when no agent did, and fails with an error
// wrapping ErrLayoutMismatch when another layout was claimed.
func ClaimLayout(ctx context.Context, root ReplicaClient, layout string) error {
	if layout == "" {
		layout = LayoutSite
	}
	for range 2 {
		found, err := ReadLayout(ctx, root)
		if err != nil {
			return err
		}
		switch found {
		case layout:
			return nil
		case "":
		default:
			return fmt.Errorf("%w: it holds the %s layout and replica.layout is %s: point replica.url elsewhere, or set replica.layout: %s",
				ErrLayoutMismatch, found, layout, found)
		}
		data, _ := json.Marshal(layoutMarker{Layout: layout})
		sum := sha256.Sum256(data)
		err = root.PutObject(ctx, LayoutMarker, Body{R: bytes.NewReader(data), Size: int64(len(data)), SHA256: sum[:],
			Reopen: func() io.Reader { return bytes.NewReader(data) }}, PutOptions{IfNoneMatch: true})
		if err == nil {
			return nil
		}
		if !errors.Is(err, ErrPreconditionFailed) {
			return fmt.Errorf("claim the %s layout: %w", layout, err)
		}
		// Another agent claimed it a moment ago: read what.
	}
	return fmt.Errorf("claim the %s layout: %s keeps changing", layout, LayoutMarker)
}
