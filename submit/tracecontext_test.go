package submit_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/chargeflow/chargeflow/submit"
)

// TraceContext writes the inserting span into the job's metadata, keeping
// what was there, and makes it the remote parent of the job's run.
func TestTraceContextCarriesTheInsertingSpan(t *testing.T) {
	t.Parallel()
	middleware := &submit.TraceContext{}
	ctx, span := sdktrace.NewTracerProvider().Tracer("test").Start(context.Background(), "POST /v1/charges")
	defer span.End()

	params := []*rivertype.JobInsertParams{
		{Kind: "charge.submit", Metadata: []byte(`{"river:keep": "me"}`)},
		{Kind: "charge.submit"},
	}
	_, err := middleware.InsertMany(ctx, params, func(context.Context) ([]*rivertype.JobInsertResult, error) { return nil, nil })
	require.NoError(t, err)
	var first map[string]string
	require.NoError(t, json.Unmarshal(params[0].Metadata, &first))
	want := "00-" + span.SpanContext().TraceID().String() + "-" + span.SpanContext().SpanID().String() + "-01"
	require.Equal(t, map[string]string{"river:keep": "me", "traceparent": want}, first)
	require.JSONEq(t, `{"traceparent": "`+want+`"}`, string(params[1].Metadata))

	var parent trace.SpanContext
	err = middleware.Work(context.Background(), &rivertype.JobRow{Metadata: params[0].Metadata}, func(ctx context.Context) error {
		parent = trace.SpanContextFromContext(ctx)
		return nil
	})
	require.NoError(t, err)
	require.True(t, parent.IsRemote())
	require.Equal(t, span.SpanContext().TraceID(), parent.TraceID())
	require.Equal(t, span.SpanContext().SpanID(), parent.SpanID())
}

// Without a span nothing is written, and a job without a trace context (or
// with garbage in its metadata) is worked with none.
func TestTraceContextWithoutASpan(t *testing.T) {
	t.Parallel()
	middleware := &submit.TraceContext{}

	params := []*rivertype.JobInsertParams{{Kind: "charge.submit"}, {Kind: "charge.submit", Metadata: []byte(`{"a": 1}`)}}
	_, err := middleware.InsertMany(context.Background(), params, func(context.Context) ([]*rivertype.JobInsertResult, error) { return nil, nil })
	require.NoError(t, err)
	require.Nil(t, params[0].Metadata)
	require.JSONEq(t, `{"a": 1}`, string(params[1].Metadata))

	for _, metadata := range []string{``, `{}`, `{"traceparent": "nonsense"}`, `not json`} {
		err := middleware.Work(context.Background(), &rivertype.JobRow{Metadata: []byte(metadata)}, func(ctx context.Context) error {
			require.False(t, trace.SpanContextFromContext(ctx).IsValid(), "metadata %q", metadata)
			return nil
		})
		require.NoError(t, err)
	}
}
