package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/internal/exampletest"
)

// TestEchoOnDefaultStack runs the unchanged example code on polarnet stacks
// made the default, as POLARNET_* variables would.
func TestEchoOnDefaultStack(t *testing.T) {
	server := exampletest.ServerThenClient(t, 7777, serve)
	var out bytes.Buffer
	require.NoError(t, client(server.String(), strings.NewReader("hello\npolarnet\n"), &out))
	assert.Equal(t, "hello\npolarnet\n", out.String())
}
