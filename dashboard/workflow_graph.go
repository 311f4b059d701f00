package dashboard

import (
	"fmt"
	"slices"

	"github.com/tributary-run/tributary/jobs/workflow"
)

// GraphMaxTasks is the largest workflow whose task graph the workflow page
// draws; a larger one is shown by its task table alone.
const GraphMaxTasks = 500

// Graph geometry, in SVG user units.
const (
	graphNodeW   = 150
	graphNodeH   = 40
	graphGapX    = 60
	graphGapY    = 16
	graphPad     = 10
	graphLabelCh = 20 // characters of a task name that fit in a node
)

// taskGraph is a workflow's tasks laid out as a layered DAG, drawn by the
// workflow template as inline SVG: dependencies to the left, dependents to
// the right.
type taskGraph struct {
	Width, Height int
	Nodes         []graphNode
	Edges         []graphEdge
}

type graphNode struct {
	Name  string
	Label string // the name, cut to fit
	State string
	X, Y  int
	Title string // the tooltip
	Href  string // the task's row in the task table, on whichever page it is
}

type graphEdge struct {
	From, To string
	Path     string // an SVG path: a curve from the dependency to the dependent
	State    string // the dependency's state
}

// layoutGraph computes the layout: each task's layer is one more than its
// deepest dependency's, so every edge points to a later layer; within a
// layer tasks are ordered by the mean position of their dependencies in
// earlier layers (one barycentre pass, which untangles fan-outs and
// diamonds), ties in the order they were added. tasks must be acyclic, as
// every stored workflow is.
func layoutGraph(tasks []workflow.TaskInfo) taskGraph {
	index := make(map[string]int, len(tasks))
	for i, t := range tasks {
		index[t.Name] = i
	}
	// Kahn's algorithm: a task's layer is final once its dependencies'
	// are.
	layer := make([]int, len(tasks))
	waiting := make([]int, len(tasks))
	dependents := make([][]int, len(tasks))
	var ready []int
	for i, t := range tasks {
		for _, d := range t.Deps {
			if j, ok := index[d]; ok {
				waiting[i]++
				dependents[j] = append(dependents[j], i)
			}
		}
		if waiting[i] == 0 {
			ready = append(ready, i)
		}
	}
	for len(ready) > 0 {
		i := ready[0]
		ready = ready[1:]
		for _, k := range dependents[i] {
			layer[k] = max(layer[k], layer[i]+1)
			if waiting[k]--; waiting[k] == 0 {
				ready = append(ready, k)
			}
		}
	}
	layers := 0
	for _, l := range layer {
		layers = max(layers, l+1)
	}
	byLayer := make([][]int, layers)
	for i := range tasks {
		byLayer[layer[i]] = append(byLayer[layer[i]], i)
	}
	pos := make([]float64, len(tasks)) // a task's row within its layer
	for l, members := range byLayer {
		if l > 0 {
			key := make(map[int]float64, len(members))
			for _, i := range members {
				sum, n := 0.0, 0
				for _, d := range tasks[i].Deps {
					if j, ok := index[d]; ok {
						sum += pos[j]
						n++
					}
				}
				key[i] = sum / float64(max(n, 1))
			}
			slices.SortStableFunc(members, func(a, b int) int {
				switch {
				case key[a] < key[b]:
					return -1
				case key[a] > key[b]:
					return 1
				}
				return a - b
			})
		}
		for row, i := range members {
			pos[i] = float64(row)
		}
	}
	tallest := 0
	for _, members := range byLayer {
		tallest = max(tallest, len(members))
	}
	g := taskGraph{
		Width:  2*graphPad + layers*graphNodeW + max(layers-1, 0)*graphGapX,
		Height: 2*graphPad + tallest*graphNodeH + max(tallest-1, 0)*graphGapY,
	}
	xy := make([][2]int, len(tasks))
	for l, members := range byLayer {
		// Centre each layer on the tallest one.
		offset := (tallest - len(members)) * (graphNodeH + graphGapY) / 2
		for row, i := range members {
			xy[i] = [2]int{graphPad + l*(graphNodeW+graphGapX), graphPad + offset + row*(graphNodeH+graphGapY)}
		}
	}
	for i, t := range tasks {
		g.Nodes = append(g.Nodes, graphNode{
			Name: t.Name, Label: preview(t.Name, graphLabelCh), State: string(t.State),
			X: xy[i][0], Y: xy[i][1], Title: nodeTitle(t),
		})
	}
	for i, t := range tasks {
		for _, d := range t.Deps {
			j, ok := index[d]
			if !ok {
				continue
			}
			x1, y1 := xy[j][0]+graphNodeW, xy[j][1]+graphNodeH/2
			x2, y2 := xy[i][0], xy[i][1]+graphNodeH/2
			mid := (x1 + x2) / 2
			g.Edges = append(g.Edges, graphEdge{
				From: d, To: t.Name, State: string(tasks[j].State),
				Path: fmt.Sprintf("M%d %d C%d %d, %d %d, %d %d", x1, y1, mid, y1, mid, y2, x2-4, y2),
			})
		}
	}
	return g
}

func nodeTitle(t workflow.TaskInfo) string {
	s := fmt.Sprintf("%s: %s, attempts: %d", t.Name, t.State, t.Attempts)
	if len(t.WaitingOn) > 0 {
		s += fmt.Sprintf(", waiting on %d", len(t.WaitingOn))
	}
	return s
}
