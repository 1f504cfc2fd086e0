// A mutex checker for `lockcheck bench --only one-lock,hard --compare-with`:
// reads a lockcheck JSONL history of one lock and checks it with porcupine,
// a crashed (info) operation returning at the end, as porcupine documents.
// Build: go build (see go.mod for where porcupine is expected).
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"time"

	"github.com/anishathalye/porcupine"
)

type ev struct {
	Process json.RawMessage `json:"process"`
	Type    string          `json:"type"`
	F       string          `json:"f"`
}
type in struct {
	client int
	f      string
}

func main() {
	file, _ := os.Open(os.Args[1])
	sc := bufio.NewScanner(file)
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	open := map[int]int{}
	var ops []porcupine.Operation
	var t int64
	for sc.Scan() {
		var e ev
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			panic(err)
		}
		var p int
		if json.Unmarshal(e.Process, &p) != nil {
			continue
		}
		t++
		if e.Type == "invoke" {
			open[p] = len(ops)
			ops = append(ops, porcupine.Operation{ClientId: p, Input: in{p, e.F}, Call: t})
			continue
		}
		at := open[p]
		delete(open, p)
		ops[at].Output = e.Type
		if e.Type == "info" {
			ops[at].Return = math.MaxInt64
		} else {
			ops[at].Return = t
		}
	}
	model := porcupine.NondeterministicModel{
		Init: func() []interface{} { return []interface{}{-1} },
		Step: func(state, input, output interface{}) []interface{} {
			s := state.(int)
			i := input.(in)
			o := output.(string)
			var next []interface{}
			if o == "info" {
				next = append(next, s)
			}
			switch {
			case i.f == "acquire" && (o == "ok" || o == "info"):
				if s == -1 {
					next = append(next, i.client)
				}
			case i.f == "acquire" && o == "fail":
				if s != -1 {
					next = append(next, s)
				}
			case i.f == "release" && (o == "ok" || o == "info"):
				if s == i.client {
					next = append(next, -1)
				}
			}
			return next
		},
	}
	start := time.Now()
	res := porcupine.CheckOperationsTimeout(model.ToModel(), ops, 60*time.Second)
	fmt.Printf("%s in %.3f s (check only, %d ops)\n", res, time.Since(start).Seconds(), len(ops))
}
