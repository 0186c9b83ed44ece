module github.com/polarnet/polarnet

go 1.26.3

require (
	github.com/stretchr/testify v1.12.1 // indirect
	golang.org/x/net v0.63.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
	gvisor.dev/gvisor v0.0.0-20260905035102-160fafc42237 // indirect
)
