package submit

import (
	"context"
	"encoding/json"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// TraceContext is the River middleware that carries the W3C trace context
// from where a job is inserted to where it is worked, so that the request
// that accepted a charge, the charge.submit run and its provider call are
// one trace. Install it on every River client that inserts or works jobs:
//
//	river.Config{Middleware: submit.Middleware()}
//
// On insert it writes the current span's context into the job's metadata as
// "traceparent" (and "tracestate"), the keys and format of the W3C header;
// on work it makes that context the remote parent of whatever span the
// worker starts. A job inserted without a span carries nothing, and a job
// without the keys is worked with a fresh trace.
//
// It makes the job a child, not a linked new trace (as rivercontrib's
// otelriver does): a charge.submit job normally runs milliseconds after its
// request, and operators want one trace from the POST to the provider call.
// It writes the same metadata keys as otelriver's trace propagation.
type TraceContext struct {
	river.MiddlewareDefaults
}

// traceMetadata is the part of a job's metadata TraceContext reads.
type traceMetadata struct {
	TraceParent string `json:"traceparent"`
	TraceState  string `json:"tracestate"`
}

// Middleware is what every River client of chargeflow installs, inserting
// or working: the trace context.
func Middleware() []rivertype.Middleware { return []rivertype.Middleware{&TraceContext{}} }

// Metadata is the metadata TraceContext gives a job inserted under ctx, for
// Queue.Row, whose row is written by SQL rather than by River's client.
// Without a span in ctx it is nil.
func Metadata(ctx context.Context) []byte {
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	if len(carrier) == 0 {
		return nil
	}
	return withTraceContext(nil, carrier)
}

// InsertMany implements rivertype.JobInsertMiddleware.
func (*TraceContext) InsertMany(ctx context.Context, manyParams []*rivertype.JobInsertParams, doInner func(context.Context) ([]*rivertype.JobInsertResult, error)) ([]*rivertype.JobInsertResult, error) {
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	if len(carrier) > 0 {
		for _, params := range manyParams {
			params.Metadata = withTraceContext(params.Metadata, carrier)
		}
	}
	return doInner(ctx)
}

// Work implements rivertype.WorkerMiddleware.
func (*TraceContext) Work(ctx context.Context, job *rivertype.JobRow, doInner func(context.Context) error) error {
	var md traceMetadata
	if len(job.Metadata) > 0 && json.Unmarshal(job.Metadata, &md) == nil && md.TraceParent != "" {
		carrier := propagation.MapCarrier{"traceparent": md.TraceParent}
		if md.TraceState != "" {
			carrier["tracestate"] = md.TraceState
		}
		if sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), carrier)); sc.IsValid() {
			ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
		}
	}
	return doInner(ctx)
}

// withTraceContext adds the carrier's keys to a job's metadata object. A
// trace is never worth failing an insert for: metadata that is not a JSON
// object is returned as it was.
func withTraceContext(metadata []byte, carrier propagation.MapCarrier) []byte {
	fields := map[string]json.RawMessage{}
	if len(metadata) > 0 {
		if err := json.Unmarshal(metadata, &fields); err != nil || fields == nil {
			return metadata
		}
	}
	for key, value := range carrier {
		encoded, err := json.Marshal(value)
		if err != nil {
			return metadata
		}
		fields[key] = encoded
	}
	out, err := json.Marshal(fields)
	if err != nil {
		return metadata
	}
	return out
}
