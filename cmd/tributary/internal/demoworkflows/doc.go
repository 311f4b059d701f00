// Package demoworkflows holds the demo workflows the tributary worker
// registers, startable by name with `tributary workflows start`:
//
//	demo.fanout {"width":N,"fail":K}  one task fans out to N parts, each
//	                                  outputting its number; K of them fail
//	                                  for good; a fan-in task sums the
//	                                  outputs that exist
//	demo.chain  {"length":N}          N tasks in a row, each outputting its
//	                                  predecessor's output plus one
//
// A worker process registers the task workers (Register) next to the
// workflow Coordinator; any process can build the workflows by name
// (NewRegistry) and insert them.
package demoworkflows
