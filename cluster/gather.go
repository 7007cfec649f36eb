package cluster

import (
	"errors"
	"slices"
	"sync"
	"time"
)

// msgGather asks a node's gather handler a named question: name, body →
// the handler's answer. The admin API uses it to list what every node
// knows (the keys it denied, the grants it gave) and to tell every node to
// forget one.
const msgGather byte = 23

// maxGatherName bounds the name of a gather question.
const maxGatherName = 64

// OnGather sets the function that answers Gather questions on this node:
// it gets the question's name and body and returns the answer body (at
// most a frame). The body is valid only during the call: copy what is
// kept. It runs on the connection's reader, so it must be quick and never
// block. It replaces the previous one.
func (n *Node) OnGather(fn func(name string, body []byte) []byte) {
	n.gatherHandler.Store(&fn)
}

// GatherResult is what Gather collected: each answering node's answer, and
// the nodes that did not answer in time, sorted.
type GatherResult struct {
	Answers    map[string][]byte
	Unanswered []string
}

// Gather asks every member, itself included, the named question at once
// and waits at most within for the answers.
func (n *Node) Gather(name string, body []byte, within time.Duration) GatherResult {
	out := GatherResult{Answers: map[string][]byte{}, Unanswered: []string{}}
	e := &encoder{}
	e.str(name)
	e.b = append(e.b, body...)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, m := range n.gatherMembers() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := n.askNodeWithin(m.Name, msgGather, e.b, within)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				out.Unanswered = append(out.Unanswered, m.Name)
				return
			}
			out.Answers[m.Name] = d.b
		}()
	}
	wg.Wait()
	slices.Sort(out.Unanswered)
	return out
}

// answerGather answers a Gather question for a peer or this node.
func (n *Node) answerGather(d *decoder, enc *encoder) error {
	name := d.str()
	if d.err != nil || len(name) > maxGatherName {
		return errors.New("malformed gather question")
	}
	body := d.b
	d.b = nil
	fn := n.gatherHandler.Load()
	if fn == nil {
		return nil // nothing to tell: an empty answer
	}
	enc.b = append(enc.b, (*fn)(name, body)...)
	return nil
}

// gatherMembers are the nodes a Gather asks: the ring's members, and this
// node, which may not be in its ring (joining or leaving).
func (n *Node) gatherMembers() []Member {
	ms := n.Ring().Members()
	if !slices.ContainsFunc(ms, func(m Member) bool { return m.Name == n.Name() }) {
		ms = append(ms, *n.self.Load())
	}
	return ms
}
