package caddymodule

import (
	"context"
	"encoding/binary"
	"net/http"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"
	"go.uber.org/zap"

	"github.com/tollgate/tollgate/adminapi"
	"github.com/tollgate/tollgate/cluster"
	"github.com/tollgate/tollgate/internal/testutil"
	"github.com/tollgate/tollgate/limiter"
)

func TestStateSurvivesARestart(t *testing.T) {
	dir := t.TempDir()
	site := `
	tollgate {
		zone api {
			limit 5 1h
			key {http.request.header.X-User}
		}
		zone rooms {
			concurrent 1
			key {http.request.header.X-User}
			lease {http.request.header.X-Room}
		}
	}
	respond "{http.tollgate.client_id}"`
	srv := startCaddyWith(t, caddyOptions{dir: dir}, "", site)
	testutil.ClearOfWindowEdge(time.Hour, 10*time.Second)
	for range 7 {
		srv.get("/", "X-User", "hal") // 5 allowed, 2 denials
	}
	_, clientID := srv.body("/", "X-User", "ivy")
	srv.get("/", "X-User", "hal", "X-Room", "lobby")
	postGrant(t, srv, `{"zone":"api","key":"ivy","amount":3,"duration":"1h"}`)

	caddyStop(t) // writes the snapshot
	srv = startCaddyWith(t, caddyOptions{dir: dir}, "", site)
	if s := srv.status("/", "X-User", "hal"); s != http.StatusTooManyRequests {
		t.Errorf("hal after a restart: %d; want still limited", s)
	}
	var cv adminapi.ClientView
	adminDo(t, srv.Admin, http.MethodGet, "/tollgate/clients/"+clientID, &cv)
	if cv.Reputation == nil || *cv.Reputation > 98 {
		t.Errorf("the client's reputation after a restart: %v; want the denials remembered", cv.Reputation)
	}
	if s := srv.status("/", "X-User", "hal", "X-Room", "kitchen"); s != http.StatusTooManyRequests {
		t.Errorf("a second room after a restart: %d; want the lease on lobby kept", s)
	}
	var g adminapi.GrantView
	if status, body := adminDo(t, srv.Admin, http.MethodGet, "/tollgate/grants/api/ivy", &g); status != http.StatusOK || g.Amount != 3 {
		t.Errorf("ivy's grant after a restart: %d %s", status, body)
	}
}

// A snapshot holding more states than max_keys allows restores what fits,
// instead of nothing.
func TestOversizedSnapshotRestoresWhatFits(t *testing.T) {
	t.Setenv("XDG_DATA_HOME", t.TempDir()) // Caddy's instance ID lives there
	s, _ := newState(10)
	s.node = cluster.Standalone(s.engine)
	s.storage.Store(&storageRef{&certmagic.FileStorage{Path: t.TempDir()}})
	now := time.Now()
	var states []limiter.State
	for i := range 25 {
		states = append(states, limiter.State{Key: limiter.Key(i + 1), Stamp: now.UnixNano(), Expires: now.Add(time.Hour).UnixNano(), Cur: 3})
	}
	b := encodeSnapshot(cluster.Kept{States: states})
	if err := s.storage.Load().Store(context.Background(), s.snapshotKey(), b); err != nil {
		t.Fatal(err)
	}
	s.restoreSnapshot(context.Background(), zap.NewNop())
	// The engine's bound is kept per shard, so what fits can be a little
	// less than max_keys; but never nothing, and never more.
	if k := s.engine.Stats().Keys; k < 5 || k > 10 {
		t.Errorf("%d keys restored from a snapshot of 25 with max_keys 10; want what fits, 5 to 10", k)
	}
}

// A snapshot names the run that wrote it, the other runs' counts its
// counters hold (and of which of their counters) and the transfers the run
// applied to them, and reads back as it was written; one of the second
// format (no generations) reads back naming the runs' first counters, and
// one of the first format (the states alone) still reads back, naming no
// run.
func TestSnapshotNamesItsRunAndReadsBackBothFormats(t *testing.T) {
	now := time.Now()
	state := func(k limiter.Key, cur uint32) limiter.State {
		return limiter.State{Key: k, Stamp: now.UnixNano(), Expires: now.Add(time.Hour).UnixNano(), Cur: cur}
	}
	kept := cluster.Kept{
		Run:    cluster.Peer{Name: "node-a:7946", Inc: 42},
		At:     now.UnixNano(),
		States: []limiter.State{state(1, 3), state(2, 5)},
		Holds: []cluster.Held{{Run: cluster.Peer{Name: "node-b:7946", Inc: 7}, State: state(2, 4), Last: true,
			In: limiter.State{Key: 2, Kind: 1, Stamp: now.UnixNano(), Expires: now.Add(time.Hour).UnixNano(), Cur: 3}}, {Run: cluster.Peer{Name: "node-a:7946", Inc: 42}, Gen: 2, State: state(2, 5)}},
		Applied: []cluster.KeptApplied{
			{From: cluster.Peer{Name: "node-c:7946", Inc: 3}, Seq: 12, Keys: []limiter.Key{1, 2}},
			{From: cluster.Peer{Name: "node-b:7946", Inc: 7}, Seq: 40, Keys: []limiter.Key{2}},
		},
		Resent: []cluster.Resent{{Marks: []cluster.Replaced{{From: cluster.Peer{Name: "node-c:7946", Inc: 3}, Seq: 13, To: cluster.Peer{Name: "node-b:7946", Inc: 7}}}, State: state(2, 1)},
			{Marks: []cluster.Replaced{{From: cluster.Peer{Name: "node-c:7946", Inc: 3}, Seq: 14, To: cluster.Peer{Name: "node-b:7946", Inc: 7}}}, Given: &cluster.GivenAgain{
				Req: limiter.Request{Key: 1, Zone: 9, Cost: 2, Limit: limiter.Limit{Quota: 10, Window: time.Minute}}, At: now.UnixNano()}}},
	}
	got, err := decodeSnapshot(encodeSnapshot(kept))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, kept) {
		t.Errorf("read back %+v; wrote %+v", got, kept)
	}

	v2 := appendRun([]byte(snapshotMagicV2), kept.Run)
	v2 = binary.LittleEndian.AppendUint64(v2, uint64(kept.At))
	v2 = limiter.AppendStates(v2, kept.States)
	v2 = binary.LittleEndian.AppendUint32(v2, uint32(len(kept.Holds)))
	var held []limiter.State
	for _, h := range kept.Holds {
		v2 = appendRun(v2, h.Run)
		held = append(held, h.State)
	}
	v2 = limiter.AppendStates(v2, held)
	v2 = appendApplied(v2, kept.Applied)
	second, err := decodeSnapshot(v2)
	if err != nil {
		t.Fatal(err)
	}
	want := kept
	want.Resent = nil
	want.Holds = slices.Clone(kept.Holds)
	for i := range want.Holds {
		want.Holds[i].Gen, want.Holds[i].Last, want.Holds[i].In = 0, false, limiter.State{}
	}
	if !reflect.DeepEqual(second, want) {
		t.Errorf("a snapshot of the second format read back as %+v; want %+v", second, want)
	}

	v3 := appendRun([]byte(snapshotMagicV3), kept.Run)
	v3 = binary.LittleEndian.AppendUint64(v3, uint64(kept.At))
	v3 = limiter.AppendStates(v3, kept.States)
	v3 = binary.LittleEndian.AppendUint32(v3, uint32(len(kept.Holds)))
	for _, h := range kept.Holds {
		v3 = appendRun(v3, h.Run)
		v3 = binary.LittleEndian.AppendUint32(v3, h.Gen)
	}
	v3 = limiter.AppendStates(v3, held)
	v3 = appendApplied(v3, kept.Applied)
	third, err := decodeSnapshot(v3)
	if err != nil {
		t.Fatal(err)
	}
	want.Holds = slices.Clone(kept.Holds)
	for i := range want.Holds {
		want.Holds[i].Last, want.Holds[i].In = false, limiter.State{}
	}
	if !reflect.DeepEqual(third, want) {
		t.Errorf("a snapshot of the third format read back as %+v; want %+v (no last-word marks)", third, want)
	}

	whole := kept
	whole.Holds = slices.Clone(kept.Holds)
	whole.Holds[0].In = limiter.State{}
	v6 := encodeSnapshot(whole)
	v6 = append([]byte(snapshotMagicV6), v6[len(snapshotMagic):len(v6)-8]...) // less the records held in part: none, no states
	sixth, err := decodeSnapshot(v6)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(sixth, whole) {
		t.Errorf("a snapshot of the sixth format read back as %+v; want %+v (each record held whole)", sixth, whole)
	}

	counts := whole
	counts.Resent = kept.Resent[:1]
	v5 := encodeSnapshot(counts)
	v5 = append([]byte(snapshotMagicV5), v5[len(snapshotMagic):len(v5)-12]...) // less the units given back again, and the records held in part: none
	fifth, err := decodeSnapshot(v5)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(fifth, counts) {
		t.Errorf("a snapshot of the fifth format read back as %+v; want %+v (no units given back again)", fifth, counts)
	}

	noResent := whole
	noResent.Resent = nil
	v4 := encodeSnapshot(noResent)
	v4 = append([]byte(snapshotMagicV4), v4[len(snapshotMagic):len(v4)-20]...) // less the counts sent again: none, no states, no units given back, no records held in part
	fourth, err := decodeSnapshot(v4)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(fourth, noResent) {
		t.Errorf("a snapshot of the fourth format read back as %+v; want %+v (no counts sent again)", fourth, noResent)
	}

	old, err := decodeSnapshot(limiter.AppendStates([]byte(snapshotMagicV1), kept.States))
	if err != nil {
		t.Fatal(err)
	}
	if old.Run != (cluster.Peer{}) || len(old.Holds) != 0 || len(old.Applied) != 0 || !reflect.DeepEqual(old.States, kept.States) {
		t.Errorf("a snapshot of the first format read back as %+v; want its states, naming no run", old)
	}

	b := encodeSnapshot(kept)
	for n := range len(b) {
		if _, err := decodeSnapshot(b[:n]); err == nil {
			t.Errorf("a snapshot cut to %d of %d bytes read back without an error", n, len(b))
		}
	}
}
