package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/internal/testenv"
)

func TestQuickstartPipe(t *testing.T) { require.NoError(t, runPipe()) }

func TestQuickstartTAP(t *testing.T) {
	testenv.RequirePriv(t)
	require.NoError(t, runTAP())
}
