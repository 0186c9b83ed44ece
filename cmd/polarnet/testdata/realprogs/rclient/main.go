// Command rclient is redigo's example of a client: it sets key k to its
// second argument on the Redis server at its first, and prints what GET
// returns.
package main

import (
	"fmt"
	"log"
	"os"

	"github.com/gomodule/redigo/redis"
)

func main() {
	c, err := redis.Dial("tcp", os.Args[1])
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Do("SET", "k", os.Args[2]); err != nil {
		log.Fatal(err)
	}
	v, err := redis.String(c.Do("GET", "k"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(v)
}
