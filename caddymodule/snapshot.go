package caddymodule

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/certmagic"
	"go.uber.org/zap"

	"github.com/tollgate/tollgate/cluster"
	"github.com/tollgate/tollgate/limiter"
)

// Snapshots: each node writes what it holds (counters, reputations, grants,
// leases: keyed hashes and numbers, nothing else) to Caddy's storage every
// snapshot interval and when it stops, and reads it back when it starts, so
// a restart does not hand an abuser a clean slate. In a cluster, a
// snapshot names the run of the node that wrote it, and the other runs'
// counts its counters hold; a restarted node keeps what it reads back
// until it has joined, then sends the counters of keys it owns or keeps
// replicas of to their owners, which count them once against what they
// hold of that run (they handed the keys over, or counted them from its
// replicas, meanwhile) and add them to the rest (what others admitted in
// fallback while it was gone). A snapshot of the first format names no
// run: its counters are restored as before, the newer of the owner's and
// the snapshot's standing, never the sum.

const defaultSnapshotInterval = time.Minute

// snapshotMagic starts a snapshot, with the format's version: the run that
// wrote it (name, incarnation), when, the states, the runs whose counts
// the counters hold (each with the generation of its counter, and whether
// the counts are that run's last word on it, see cluster.Held) with those
// counts, and the transfers the run applied to them whose senders may not
// have had them acknowledged, and the counts sent again in place of
// transfers to runs taken for dead that the counters hold (see
// encodeSnapshot), and the units given back again in place of
// give-backs to runs taken for dead that they lack, and what the counters
// hold of the runs' counts they hold less of (cluster.Held.In).
// snapshotMagicV6 starts one of the sixth format: the same, without what
// the counters hold less of (each record read back as held whole).
// snapshotMagicV5 starts one of the fifth format: as the sixth, without
// the units given back again.
// snapshotMagicV4 starts one of the fourth format: the same, without the
// counts sent again.
// snapshotMagicV3 starts one of the third format: the same, without the
// last-word marks (each record read back as a copy's).
// snapshotMagicV2 starts one of the second format: as the third, without
// the generations (each the run's first counter of its key).
// snapshotMagicV1 starts one of the first format: the states alone.
const (
	snapshotMagic   = "TGSN7"
	snapshotMagicV6 = "TGSN6"
	snapshotMagicV5 = "TGSN5"
	snapshotMagicV4 = "TGSN4"
	snapshotMagicV3 = "TGSN3"
	snapshotMagicV2 = "TGSN2"
	snapshotMagicV1 = "TGSN1"
)

// maxRunName bounds the length of a run's name read from a snapshot.
const maxRunName = 1024

// encodeSnapshot returns k in the snapshot format: the magic; the run
// (name as a length and bytes, incarnation); when it was kept (Unix ns);
// the states; the number of runs held, each run's name, incarnation,
// generation (32 bits) and last-word mark (a byte, 1 if the counts are
// the run's last word on its counter), and the counts held of them as
// states, in the same order; the number of
// transfers applied, each its sender's run, its number (64 bits) and the
// number of its keys and the keys (64 bits each); the number of counts
// sent again held, each the number of transfers it replaces and each of
// those (its sender's run, its number, the run it was sent to), and the
// counts as states, in the same order (a zero state for a record of units
// given back); then the number of records of units given back again,
// each the position of its record (32 bits), its request as the peer
// protocol writes it (cluster.AppendRequest) and the instant it was
// counted at (Unix ns); then the number of records of runs' counts held
// in part, each the position of its record (32 bits), and what the
// counters hold of them as states, in the same order. Numbers are
// little-endian, lengths and counts 32 bits.
func encodeSnapshot(k cluster.Kept) []byte {
	b := []byte(snapshotMagic)
	b = appendRun(b, k.Run)
	b = binary.LittleEndian.AppendUint64(b, uint64(k.At))
	b = limiter.AppendStates(b, k.States)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(k.Holds)))
	held := make([]limiter.State, len(k.Holds))
	for i, h := range k.Holds {
		b = appendRun(b, h.Run)
		b = binary.LittleEndian.AppendUint32(b, h.Gen)
		b = append(b, boolByte(h.Last))
		held[i] = h.State
	}
	b = limiter.AppendStates(b, held)
	b = appendApplied(b, k.Applied)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(k.Resent)))
	resent := make([]limiter.State, len(k.Resent))
	for i, x := range k.Resent {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(x.Marks)))
		for _, m := range x.Marks {
			b = appendRun(b, m.From)
			b = binary.LittleEndian.AppendUint64(b, m.Seq)
			b = appendRun(b, m.To)
		}
		resent[i] = x.State
	}
	b = limiter.AppendStates(b, resent)
	var given int
	for _, x := range k.Resent {
		if x.Given != nil {
			given++
		}
	}
	b = binary.LittleEndian.AppendUint32(b, uint32(given))
	for i, x := range k.Resent {
		if x.Given != nil {
			b = binary.LittleEndian.AppendUint32(b, uint32(i))
			b = cluster.AppendRequest(b, x.Given.Req)
			b = binary.LittleEndian.AppendUint64(b, uint64(x.Given.At))
		}
	}
	var in []limiter.State
	for _, h := range k.Holds {
		if h.In.Kind != 0 {
			in = append(in, h.In)
		}
	}
	b = binary.LittleEndian.AppendUint32(b, uint32(len(in)))
	for i, h := range k.Holds {
		if h.In.Kind != 0 {
			b = binary.LittleEndian.AppendUint32(b, uint32(i))
		}
	}
	return limiter.AppendStates(b, in)
}

// appendApplied appends the transfers applied, as encodeSnapshot writes
// them.
func appendApplied(b []byte, applied []cluster.KeptApplied) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(applied)))
	for _, a := range applied {
		b = appendRun(b, a.From)
		b = binary.LittleEndian.AppendUint64(b, a.Seq)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(a.Keys)))
		for _, key := range a.Keys {
			b = binary.LittleEndian.AppendUint64(b, uint64(key))
		}
	}
	return b
}

// appendRun appends a run: its name's length and bytes, its incarnation.
func appendRun(b []byte, p cluster.Peer) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(p.Name)))
	b = append(b, p.Name...)
	return binary.LittleEndian.AppendUint64(b, p.Inc)
}

// decodeSnapshot reads a snapshot of either format. What it allocates is
// bounded by the input's size.
func decodeSnapshot(b []byte) (cluster.Kept, error) {
	var k cluster.Kept
	gens, marks, resent, given, in := true, true, true, true, true
	switch {
	case strings.HasPrefix(string(b), snapshotMagic):
		b = b[len(snapshotMagic):]
	case strings.HasPrefix(string(b), snapshotMagicV6):
		b, in = b[len(snapshotMagicV6):], false
	case strings.HasPrefix(string(b), snapshotMagicV5):
		b, given, in = b[len(snapshotMagicV5):], false, false
	case strings.HasPrefix(string(b), snapshotMagicV4):
		b, resent, in = b[len(snapshotMagicV4):], false, false
	case strings.HasPrefix(string(b), snapshotMagicV3):
		b, marks, resent, in = b[len(snapshotMagicV3):], false, false, false
	case strings.HasPrefix(string(b), snapshotMagicV2):
		b, gens, marks, resent, in = b[len(snapshotMagicV2):], false, false, false, false
	case strings.HasPrefix(string(b), snapshotMagicV1):
		states, err := decodeStates(b[len(snapshotMagicV1):])
		k.States = states
		return k, err
	default:
		return k, errors.New("not a snapshot")
	}
	var err error
	if k.Run, b, err = readRun(b); err != nil {
		return k, err
	}
	if len(b) < 8 {
		return k, limiter.ErrTruncated
	}
	k.At = int64(binary.LittleEndian.Uint64(b))
	b = b[8:]
	if len(b) < 4 {
		return k, limiter.ErrTruncated
	}
	if k.States, b, err = limiter.DecodeStates(b, int(binary.LittleEndian.Uint32(b))); err != nil {
		return k, err
	}
	if len(b) < 4 {
		return k, limiter.ErrTruncated
	}
	n := int(binary.LittleEndian.Uint32(b))
	b = b[4:]
	if n > len(b)/12 { // a run takes 12 bytes at least
		return k, fmt.Errorf("%d runs held: more than the input holds", n)
	}
	runs, runGens, lasts := make([]cluster.Peer, n), make([]uint32, n), make([]bool, n)
	for i := range runs {
		if runs[i], b, err = readRun(b); err != nil {
			return k, err
		}
		if gens {
			if len(b) < 4 {
				return k, limiter.ErrTruncated
			}
			runGens[i], b = binary.LittleEndian.Uint32(b), b[4:]
		}
		if marks {
			if len(b) < 1 {
				return k, limiter.ErrTruncated
			}
			if b[0] > 1 {
				return k, fmt.Errorf("a last-word mark of %d: want 0 or 1", b[0])
			}
			lasts[i], b = b[0] == 1, b[1:]
		}
	}
	if len(b) < 4 {
		return k, limiter.ErrTruncated
	}
	held, b, err := limiter.DecodeStates(b, n)
	if err != nil {
		return k, err
	}
	if len(held) != n {
		return k, fmt.Errorf("%d counts held for %d runs", len(held), n)
	}
	for i := range runs {
		k.Holds = append(k.Holds, cluster.Held{Run: runs[i], Gen: runGens[i], State: held[i], Last: lasts[i]})
	}
	if k.Applied, b, err = readApplied(b); err != nil {
		return k, err
	}
	if resent {
		if k.Resent, b, err = readResent(b); err != nil {
			return k, err
		}
	}
	if resent && given {
		if b, err = readGivenAgain(b, k.Resent); err != nil {
			return k, err
		}
	}
	if in {
		if b, err = readHeldIn(b, k.Holds); err != nil {
			return k, err
		}
	}
	if len(b) != 0 {
		return k, fmt.Errorf("%d bytes left over", len(b))
	}
	return k, nil
}

// readHeldIn reads what the counters hold of the records holds they hold
// less of, as encodeSnapshot wrote it, into holds, and returns what
// follows.
func readHeldIn(b []byte, holds []cluster.Held) ([]byte, error) {
	if len(b) < 4 {
		return b, limiter.ErrTruncated
	}
	n := int(binary.LittleEndian.Uint32(b))
	b = b[4:]
	if n > len(holds) || n > len(b)/4 {
		return b, fmt.Errorf("%d records held in part: more than the %d records, or than the input holds", n, len(holds))
	}
	at := make([]int, n)
	for i := range at {
		at[i], b = int(binary.LittleEndian.Uint32(b)), b[4:]
		if at[i] >= len(holds) {
			return b, fmt.Errorf("a record held in part at position %d of %d", at[i], len(holds))
		}
	}
	if len(b) < 4 {
		return b, limiter.ErrTruncated
	}
	states, b, err := limiter.DecodeStates(b, n)
	if err != nil {
		return b, err
	}
	if len(states) != n {
		return b, fmt.Errorf("%d counts held in part for %d records", len(states), n)
	}
	for i, s := range states {
		if s.Kind == 0 {
			return b, fmt.Errorf("a count held in part of no kind at position %d", at[i])
		}
		holds[at[i]].In = s
	}
	return b, nil
}

// readApplied reads the transfers applied that encodeSnapshot wrote, and
// returns what follows them.
func readApplied(b []byte) ([]cluster.KeptApplied, []byte, error) {
	if len(b) < 4 {
		return nil, b, limiter.ErrTruncated
	}
	n := int(binary.LittleEndian.Uint32(b))
	b = b[4:]
	if n > len(b)/24 { // a transfer takes 24 bytes at least
		return nil, b, fmt.Errorf("%d transfers applied: more than the input holds", n)
	}
	var out []cluster.KeptApplied
	for range n {
		from, rest, err := readRun(b)
		if err != nil {
			return nil, rest, err
		}
		b = rest
		if len(b) < 12 {
			return nil, b, limiter.ErrTruncated
		}
		a := cluster.KeptApplied{From: from, Seq: binary.LittleEndian.Uint64(b)}
		keys := int(binary.LittleEndian.Uint32(b[8:]))
		b = b[12:]
		if keys > len(b)/8 {
			return nil, b, fmt.Errorf("a transfer applied with %d keys: more than the input holds", keys)
		}
		a.Keys = make([]limiter.Key, keys)
		for i := range a.Keys {
			a.Keys[i] = limiter.Key(binary.LittleEndian.Uint64(b[8*i:]))
		}
		b = b[8*keys:]
		out = append(out, a)
	}
	return out, b, nil
}

// readResent reads the counts sent again that encodeSnapshot wrote, and
// returns what follows them.
func readResent(b []byte) ([]cluster.Resent, []byte, error) {
	if len(b) < 4 {
		return nil, b, limiter.ErrTruncated
	}
	n := int(binary.LittleEndian.Uint32(b))
	b = b[4:]
	if n > len(b)/4 { // a record takes 4 bytes at least
		return nil, b, fmt.Errorf("%d counts sent again: more than the input holds", n)
	}
	var out []cluster.Resent
	if n > 0 {
		out = make([]cluster.Resent, n)
	}
	for i := range out {
		if len(b) < 4 {
			return nil, b, limiter.ErrTruncated
		}
		marks := int(binary.LittleEndian.Uint32(b))
		b = b[4:]
		if marks > len(b)/32 { // a transfer replaced takes 32 bytes at least
			return nil, b, fmt.Errorf("counts sent again in place of %d transfers: more than the input holds", marks)
		}
		out[i].Marks = make([]cluster.Replaced, marks)
		for j := range out[i].Marks {
			from, rest, err := readRun(b)
			if err != nil {
				return nil, rest, err
			}
			if len(rest) < 8 {
				return nil, rest, limiter.ErrTruncated
			}
			seq := binary.LittleEndian.Uint64(rest)
			to, rest, err := readRun(rest[8:])
			if err != nil {
				return nil, rest, err
			}
			out[i].Marks[j], b = cluster.Replaced{From: from, Seq: seq, To: to}, rest
		}
	}
	if len(b) < 4 {
		return nil, b, limiter.ErrTruncated
	}
	states, b, err := limiter.DecodeStates(b, n)
	if err != nil {
		return nil, b, err
	}
	if len(states) != n {
		return nil, b, fmt.Errorf("%d counts for %d records of counts sent again", len(states), n)
	}
	for i := range out {
		out[i].State = states[i]
	}
	return out, b, nil
}

// readGivenAgain reads the units given back again that encodeSnapshot
// wrote into the records of resent they belong to, and returns what
// follows them.
func readGivenAgain(b []byte, resent []cluster.Resent) ([]byte, error) {
	if len(b) < 4 {
		return b, limiter.ErrTruncated
	}
	n := int(binary.LittleEndian.Uint32(b))
	b = b[4:]
	if n > len(resent) {
		return b, fmt.Errorf("%d records of units given back again for %d records", n, len(resent))
	}
	for range n {
		if len(b) < 4 {
			return b, limiter.ErrTruncated
		}
		i := binary.LittleEndian.Uint32(b)
		req, rest, err := cluster.ReadRequest(b[4:])
		if err != nil {
			return rest, err
		}
		if len(rest) < 8 {
			return rest, limiter.ErrTruncated
		}
		if uint64(i) >= uint64(len(resent)) || resent[i].Given != nil {
			return rest, fmt.Errorf("units given back again for record %d of %d records, or twice", i, len(resent))
		}
		resent[i].Given = &cluster.GivenAgain{Req: req, At: int64(binary.LittleEndian.Uint64(rest))}
		b = rest[8:]
	}
	return b, nil
}

// decodeStates reads states alone (the first format).
func decodeStates(raw []byte) ([]limiter.State, error) {
	if len(raw) < 4 {
		return nil, limiter.ErrTruncated
	}
	// The count is bounded by the input's size, so is what decoding takes.
	states, _, err := limiter.DecodeStates(raw, int(binary.LittleEndian.Uint32(raw)))
	return states, err
}

// readRun reads a run that appendRun wrote, and returns what follows it.
func readRun(b []byte) (cluster.Peer, []byte, error) {
	if len(b) < 4 {
		return cluster.Peer{}, b, limiter.ErrTruncated
	}
	n := int(binary.LittleEndian.Uint32(b))
	b = b[4:]
	if n > maxRunName || len(b) < n+8 {
		return cluster.Peer{}, b, fmt.Errorf("a run's name of %d bytes: longer than %d or than the input holds", n, maxRunName)
	}
	p := cluster.Peer{Name: string(b[:n]), Inc: binary.LittleEndian.Uint64(b[n:])}
	return p, b[n+8:], nil
}

// storageRef holds Caddy's storage, which may change with the config.
type storageRef struct{ certmagic.Storage }

// snapshotKey is where this node's snapshot lives in storage: under the
// node's name in a cluster, under Caddy's instance ID for a single node, so
// that instances sharing one storage never read each other's.
func (s *state) snapshotKey() string {
	s.mu.Lock()
	clustered, node := s.clusterCfg != nil, s.node
	s.mu.Unlock()
	if clustered && node != nil {
		return snapshotPrefix + strings.NewReplacer(":", "_", "/", "_", "[", "", "]", "").Replace(node.Name())
	}
	// Read afresh each time, not kept: other apps starting beside this one
	// (the TLS storage cleaner) may create Caddy's instance ID file at the
	// same moment, and only the ID that landed on disk names the snapshot
	// the next start reads.
	id, err := caddy.InstanceID()
	if err != nil {
		return legacySnapshotKey
	}
	return snapshotPrefix + id.String()
}

// snapshotPrefix starts every snapshot's storage key; legacySnapshotKey is
// where a single node kept it before snapshots were keyed by instance.
const (
	snapshotPrefix    = "tollgate/snapshots/"
	legacySnapshotKey = snapshotPrefix + "local"
)

// writeSnapshot writes the engine's live state to storage.
func (s *state) writeSnapshot() {
	s.mu.Lock()
	node := s.node
	s.mu.Unlock()
	s.writeSnapshotAt(s.snapshotKey(), node)
}

// writeSnapshotAt writes the engine's live state to storage under key,
// naming node's run, if any, as the run that counted it.
func (s *state) writeSnapshotAt(key string, node *cluster.Node) {
	ref := s.storage.Load()
	if ref == nil {
		return
	}
	var states []limiter.State
	s.engine.Range(time.Now(), func(st limiter.State) bool {
		states = append(states, st)
		return true
	})
	kept := cluster.Kept{States: states}
	if node != nil {
		kept = node.Keep(states)
	}
	b := encodeSnapshot(kept)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := ref.Store(ctx, key, b); err != nil {
		s.logger().Error("writing snapshot", zap.Error(err))
	}
}

// restoreSnapshot merges what the last snapshot holds into the engine.
func (s *state) restoreSnapshot(ctx context.Context, logger *zap.Logger) {
	ref := s.storage.Load()
	if ref == nil {
		return
	}
	key := s.snapshotKey()
	s.mu.Lock()
	single := s.clusterCfg == nil
	s.mu.Unlock()
	b, err := ref.Load(ctx, key)
	if errors.Is(err, fs.ErrNotExist) && single && key != legacySnapshotKey {
		key = legacySnapshotKey // a single node's snapshot from before it was keyed by instance
		b, err = ref.Load(ctx, key)
	}
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	if err != nil {
		logger.Error("reading snapshot; starting without it", zap.String("storage_key", key), zap.Error(err))
		return
	}
	snap, err := decodeSnapshot(b)
	if err != nil {
		logger.Error("reading snapshot; starting without it", zap.String("storage_key", key), zap.Error(err))
		return
	}
	states := snap.States
	es := s.engine.Stats()
	snap.States = s.fitSnapshot(states, es.MaxKeys-es.Keys)
	s.mu.Lock()
	node := s.node
	s.mu.Unlock()
	if node != nil {
		// In a cluster, the snapshot may be an older copy of counts its
		// owners hold and added to since: they weigh it by the run that
		// wrote it (the newer of theirs and its if it names none), once
		// this node has joined.
		node.RestoreCounters(snap)
	} else {
		s.engine.Merge(time.Now(), snap.States)
	}
	if len(snap.States) < len(states) {
		logger.Warn("the snapshot holds more than max_keys allows; restored what fits, the keys this node owns first",
			zap.Int("states", len(states)), zap.Int("restored", len(snap.States)), zap.Int("max_keys", es.MaxKeys))
	}
	logger.Info("restored counters, reputations, grants and leases from the snapshot", zap.Int("states", len(snap.States)), zap.String("storage_key", key), zap.String("run", snap.Run.Name))
}

// fitSnapshot returns at most room of states: those of keys this node owns
// first, then the others, each group the latest-expiring first.
func (s *state) fitSnapshot(states []limiter.State, room int) []limiter.State {
	if len(states) <= room {
		return states
	}
	room = max(room, 0)
	s.mu.Lock()
	node := s.node
	s.mu.Unlock()
	owned := func(k limiter.Key) bool { return node == nil || node.Owner(k).Name == node.Name() }
	slices.SortStableFunc(states, func(a, b limiter.State) int {
		if oa, ob := owned(a.Key), owned(b.Key); oa != ob {
			if oa {
				return -1
			}
			return 1
		}
		return cmp.Compare(b.Expires, a.Expires)
	})
	return states[:room]
}

// snapshotInterval is the configured interval, or the default.
func (a *App) snapshotInterval() time.Duration {
	if a.SnapshotInterval == 0 {
		return defaultSnapshotInterval
	}
	return time.Duration(a.SnapshotInterval)
}

// boolByte returns 1 for true, 0 for false.
func boolByte(v bool) byte {
	if v {
		return 1
	}
	return 0
}
