package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runtwice/twice/internal/pgserver/dockerproto"
)

// TestServeMisuse: requests the helper cannot act on get an error each,
// without a Docker engine, and serve ends when its input does.
func TestServeMisuse(t *testing.T) {
	in := strings.Join([]string{
		`not json`,
		`{"op":"state"}`,
		`{"op":"exec","cmd":["pg_dump"]}`,
		`{"op":"start"}`,
		`{"op":"stop"}`,
	}, "\n") + "\n"
	var out bytes.Buffer
	require.Equal(t, 0, serve(strings.NewReader(in), &out))
	var got []dockerproto.Response
	dec := json.NewDecoder(&out)
	for dec.More() {
		var r dockerproto.Response
		require.NoError(t, dec.Decode(&r))
		got = append(got, r)
	}
	want := []string{
		`twice-pgdocker: bad request "not json"`,
		`twice-pgdocker: "state" before start`,
		`twice-pgdocker: "exec" before start`,
		`twice-pgdocker: start needs an image and a password`,
		`twice-pgdocker: "stop" before start`,
	}
	require.Len(t, got, len(want), "one answer a request")
	for i, w := range want {
		assert.Contains(t, got[i].Error, w)
		assert.False(t, got[i].Unavailable, "%q is no missing engine", got[i].Error)
	}
}
