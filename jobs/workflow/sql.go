package workflow

import "github.com/tributary-run/tributary/queue"

// statements are the package's SQL constants qualified for one schema; each
// constant sits beside the code that runs it.
type statements struct {
	insertWorkflow, selectByKey, insertTasks                                         string
	lockWorkflows, finishTasks, finishRelease, decrementDeps, taskStates, setDecided string
	applyCounts                                                                      string
	depOutputs, taskOutput                                                           string
	selectWorkflow, selectTasks, listWorkflows, recount, cancelTasks                 string
	retryTasks, undecidedTasks                                                       string
}

func qualify(schema string) statements {
	q := func(s string) string { return queue.Qualify(schema, s) }
	return statements{
		insertWorkflow: q(insertWorkflowSQL), selectByKey: q(selectByKeySQL), insertTasks: q(insertTasksSQL),
		lockWorkflows: q(lockWorkflowsSQL), finishTasks: q(finishTasksSQL), finishRelease: q(finishReleaseSQL), decrementDeps: q(decrementDepsSQL),
		taskStates: q(taskStatesSQL), setDecided: q(setDecidedSQL), applyCounts: q(applyCountsSQL),
		depOutputs: q(depOutputsSQL), taskOutput: q(taskOutputSQL),
		selectWorkflow: q(selectWorkflowSQL), selectTasks: q(selectTasksSQL), listWorkflows: q(listWorkflowsSQL),
		recount: q(recountSQL), cancelTasks: q(cancelTasksSQL), retryTasks: q(retryTasksSQL),
		undecidedTasks: q(undecidedTasksSQL),
	}
}
