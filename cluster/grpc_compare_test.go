package cluster

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"

	"github.com/tollgate/tollgate/limiter"
)

// The peer RPC is a protocol of Tollgate's own rather than gRPC (which is
// in Caddy's dependency graph) because of what BenchmarkPeerRPC measures:
// one check at a time, and 64 at once, forwarded to another node on
// loopback, through Tollgate's peer connection (mutual authentication,
// AES-GCM, batching) and through a gRPC unary call carrying the same bytes
// (no TLS, no authentication: the cheapest gRPC can be) to the same engine.

// rawCodec passes byte slices through gRPC untouched.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "tollgate-raw" }

func init() { encoding.RegisterCodec(rawCodec{}) }

// startGRPCCounter serves one method that decodes a zone request, takes
// it from engine and encodes the result, as the peer server does.
func startGRPCCounter(tb testing.TB, engine *limiter.Engine) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ForceServerCodec(rawCodec{}))
	srv.RegisterService(&grpc.ServiceDesc{
		ServiceName: "tollgate.Counter",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: "Take",
			Handler: func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
				var in []byte
				if err := dec(&in); err != nil {
					return nil, err
				}
				r, err := decodeZoneReq(&decoder{b: in})
				if err != nil {
					return nil, err
				}
				res := engine.TakeOne(time.Now(), r)
				e := &encoder{}
				encodeZoneRes(e, &res)
				return &e.b, nil
			},
		}},
	}, struct{}{})
	go srv.Serve(l)
	tb.Cleanup(srv.Stop)
	return l.Addr().String()
}

func BenchmarkPeerRPC(b *testing.B) {
	nodes := startNodes(b, 2)
	key := keyOwnedBy(b, nodes[0].Ring(), nodes[1].Name(), 0)
	req := limiter.Request{Key: key, Zone: 1, Limit: limiter.Limit{Quota: 1 << 30, Window: time.Hour}}

	addr := startGRPCCounter(b, limiter.New(limiter.Config{}))
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	grpcTake := func() {
		e := &encoder{}
		encodeZoneReq(e, &req)
		var out []byte
		if err := conn.Invoke(context.Background(), "/tollgate.Counter/Take", &e.b, &out); err != nil {
			b.Fatal(err)
		}
		if !decodeZoneRes(&decoder{b: out}).Allowed {
			b.Fatal("denied")
		}
	}
	tollgateTake := func() {
		res := make([]limiter.Result, 1)
		if ok, src := nodes[0].Take(time.Now(), []limiter.Request{req}, res); !ok || src != SourcePeer {
			b.Fatalf("%v %v", ok, src)
		}
	}
	for _, run := range []struct {
		name string
		take func()
	}{{"tollgate", tollgateTake}, {"grpc", grpcTake}} {
		b.Run(run.name+"/sequential", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				run.take()
			}
		})
		b.Run(run.name+"/64-callers", func(b *testing.B) {
			b.ReportAllocs()
			b.SetParallelism(32)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					run.take()
				}
			})
		})
	}
}
