// Command mrserver serves miniredis, an in-memory Redis server, on the
// address given as its argument.
package main

import (
	"log"
	"os"

	"github.com/alicebob/miniredis/v2"
)

func main() {
	m := miniredis.NewMiniRedis()
	if err := m.StartAddr(os.Args[1]); err != nil {
		log.Fatal(err)
	}
	log.Printf("serving on %s", m.Addr())
	select {}
}
