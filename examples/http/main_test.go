package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/internal/exampletest"
)

// TestHTTPOnDefaultStack runs the unchanged example code on polarnet stacks
// made the default, as POLARNET_* variables would.
func TestHTTPOnDefaultStack(t *testing.T) {
	server := exampletest.ServerThenClient(t, 8080, serve)
	var body, status bytes.Buffer
	require.NoError(t, get("http://"+server.String()+"/hello", &body, &status))
	assert.Equal(t, "200 OK\n", status.String())
	assert.Regexp(t, `^hello 198\.18\.0\.1:\d+, you asked for /hello\n$`, body.String())
}
