package cluster

import (
	"slices"
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// TestGatherAsksEveryNodeAndNamesTheSilentOnes gathers from three nodes,
// then with one too slow for the deadline and one crashed: the answers of
// the others come back and the silent ones are named.
func TestGatherAsksEveryNodeAndNamesTheSilentOnes(t *testing.T) {
	nodes := startNodes(t, 3)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	slow := make(chan bool, 1)
	for _, n := range nodes {
		name := n.Name()
		n.OnGather(func(q string, body []byte) []byte {
			if q == "slow?" && name == nodes[1].Name() {
				slow <- true
				<-release
			}
			return append([]byte(name+":"+q+":"), body...)
		})
	}
	res := nodes[0].Gather("who", []byte("x"), 5*time.Second)
	if len(res.Answers) != 3 || len(res.Unanswered) != 0 {
		t.Fatalf("answers %v, unanswered %v; want all three", res.Answers, res.Unanswered)
	}
	for _, n := range nodes {
		if got := string(res.Answers[n.Name()]); got != n.Name()+":who:x" {
			t.Errorf("%s answered %q", n.Name(), got)
		}
	}

	res = nodes[0].Gather("slow?", nil, 300*time.Millisecond)
	<-slow
	if len(res.Answers) != 2 || !slices.Equal(res.Unanswered, []string{nodes[1].Name()}) {
		t.Fatalf("with a slow node: answers %d, unanswered %v; want it named", len(res.Answers), res.Unanswered)
	}

	nodes[2].Close()
	res = nodes[0].Gather("who", nil, time.Second)
	if res.Answers[nodes[0].Name()] == nil || !slices.Contains(res.Unanswered, nodes[2].Name()) {
		t.Fatalf("with a crashed node: answers %v, unanswered %v; want it named", res.Answers, res.Unanswered)
	}
}

// TestGatherOnAStandaloneNodeAsksItself answers from the node alone, and
// answers empty without a handler.
func TestGatherOnAStandaloneNodeAsksItself(t *testing.T) {
	n := Standalone(limiter.New(limiter.Config{}))
	if res := n.Gather("q", nil, time.Second); len(res.Answers) != 1 || len(res.Answers["local"]) != 0 || len(res.Unanswered) != 0 {
		t.Fatalf("without a handler: %+v", res)
	}
	n.OnGather(func(q string, _ []byte) []byte { return []byte(q) })
	if res := n.Gather("q", nil, time.Second); string(res.Answers["local"]) != "q" {
		t.Fatalf("with a handler: %+v", res)
	}
}
