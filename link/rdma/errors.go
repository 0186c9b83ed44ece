package rdma

import (
	"fmt"

	"github.com/polarnet/polarnet/link"
)

// isNotSupported is the Is method's test of the errors that say the host
// cannot run the link.
func isNotSupported(target error) bool { return target == link.ErrNotSupported }

// wcStatusNames are the names of ibv_wc_status values, by value.
var wcStatusNames = [...]string{
	"success", "local length error", "local QP operation error", "local EE context operation error",
	"local protection error", "work request flushed", "memory window bind error", "bad response error",
	"local access error", "remote invalid request error", "remote access error", "remote operation error",
	"transport retry counter exceeded", "RNR retry counter exceeded", "local RDD violation error",
	"remote invalid RD request", "remote aborted error", "invalid EE context number",
	"invalid EE context state", "fatal error", "response timeout error", "general error",
	"tag matching error", "tag matching rendezvous incomplete",
}

// wcStatusName names an ibv_wc_status value.
func wcStatusName(code uint32) string {
	if int(code) < len(wcStatusNames) {
		return wcStatusNames[code]
	}
	return fmt.Sprintf("unknown status %d", code)
}

// ibv_wc_status values the bookkeeping and the fake device use.
const (
	wcCodeSuccess  = 0
	wcCodeLocLen   = 1
	wcCodeLocQPOp  = 2
	wcCodeLocProt  = 4
	wcCodeFlushErr = 5
	wcCodeGeneral  = 21
)
