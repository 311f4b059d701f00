package workflow

import "github.com/tributary-run/tributary/queue"

// statements are the package's SQL constants qualified for one schema; each
// constant sits beside the code that runs it.
type statements struct {
	insertWorkflow, selectByKey, insertTasks                                  string
	lockWorkflows, finishTasks, finishRelease, completeRelease, decrementDeps string
	taskStates, setDecided, applyCounts, applyCountsProbe                     string
	depOutputs, taskOutput                                                    string
	selectWorkflow, selectTasks, listWorkflows, recount, cancelTasks          string
	retryTasks, runningFrom                                                   string

	selectSteps, selectStep, insertStep, finishStep, selectStepRecord    string
	workflowStatus, lockSignal, insertSignal, waitingJobs, consumeSignal string
	recordSignal, jobWaits, signalSent, signalledWaits                   string
	taskNamesStates, linkExpanded, countExpanded                         string
	setParent, runningChildren, parentOf                                 string
	declareKey, lockKey, redeclareKey, keyUse, keyWaiting, nextQueued    string
	admitWorkflow, setQueued, queuedRoots, cancelledLinks, taskSteps     string
	taskRecorded                                                         string
}

func qualify(schema string) statements {
	q := func(s string) string { return queue.Qualify(schema, s) }
	return statements{
		insertWorkflow: q(insertWorkflowSQL), selectByKey: q(selectByKeySQL), insertTasks: q(insertTasksSQL),
		lockWorkflows: q(lockWorkflowsSQL), finishTasks: q(finishTasksSQL), finishRelease: q(finishReleaseSQL), completeRelease: q(completeReleaseSQL), decrementDeps: q(decrementDepsSQL),
		taskStates: q(taskStatesSQL), setDecided: q(setDecidedSQL), applyCounts: q(applyCountsSQL), applyCountsProbe: q(applyCountsProbeSQL),
		depOutputs: q(depOutputsSQL), taskOutput: q(taskOutputSQL),
		selectWorkflow: q(selectWorkflowSQL), selectTasks: q(selectTasksSQL), listWorkflows: q(listWorkflowsSQL),
		recount: q(recountSQL), cancelTasks: q(cancelTasksSQL), retryTasks: q(retryTasksSQL),
		runningFrom: q(runningFromSQL),
		selectSteps: q(selectStepsSQL), selectStep: q(selectStepSQL), insertStep: q(insertStepSQL), finishStep: q(finishStepSQL),
		selectStepRecord: q(selectStepRecordSQL),
		workflowStatus:   q(workflowStatusSQL), lockSignal: lockSignalSQL, insertSignal: q(insertSignalSQL),
		waitingJobs: q(waitingJobsSQL), consumeSignal: q(consumeSignalSQL), recordSignal: q(recordSignalSQL),
		jobWaits: q(jobWaitsSQL), signalSent: q(signalSentSQL), signalledWaits: q(signalledWaitsSQL),
		taskNamesStates: q(taskNamesStatesSQL), linkExpanded: q(linkExpandedSQL), countExpanded: q(countExpandedSQL),
		setParent: q(setParentSQL), runningChildren: q(runningChildrenSQL), parentOf: q(parentOfSQL),
		declareKey: q(declareKeySQL), lockKey: q(lockKeySQL), redeclareKey: q(redeclareKeySQL),
		keyUse: q(keyUseSQL), keyWaiting: q(keyWaitingSQL), nextQueued: q(nextQueuedSQL), admitWorkflow: q(admitWorkflowSQL),
		setQueued: q(setQueuedSQL), queuedRoots: q(queuedRootsSQL), cancelledLinks: q(cancelledLinksSQL),
		taskSteps: q(taskStepsSQL), taskRecorded: q(taskRecordedSQL),
	}
}
