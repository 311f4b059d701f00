package riverjob

// Statements returns every SQL statement of the package by the name of its
// constant, unqualified, for the tests that prepare each one against River's
// tables, and the statements callers compose from the exported fragments
// (named in parentheses). TestStatementsListed fails when a constant is
// missing here.
func Statements() map[string]string {
	return map[string]string{
		"(StateCountsSQL capped)":  StateCountsSQL([]string{"completed", "discarded", "cancelled"}, true),
		"(StateCountsSQL exact)":   StateCountsSQL([]string{"completed", "discarded", "cancelled"}, false),
		"(QueueCountsSQL capped)":  QueueCountsSQL(true),
		"(QueueCountsSQL exact)":   QueueCountsSQL(false),
		"(JobListSQL filtered)":    JobListSQL + "\nWHERE state = $1::" + StateType + " AND kind = $2 AND queue = $3 AND id < $4\nORDER BY id DESC LIMIT $5",
		"JobStateEstimateSQL":      JobStateEstimateSQL,
		"(CompleteRunningUpdate)":  "WITH done AS (" + CompleteRunningUpdate("$1", "$2", "$3") + ") SELECT id FROM done",
		"(RunningAttempts)":        "WITH done AS (" + RunningAttempts("$1", "$2") + ") SELECT id FROM done",
		"(PromoteUpdate)":          "WITH prom AS (" + PromoteUpdate("$1::bigint[]") + ") SELECT id, queue FROM prom",
		"JobStateQueueEstimateSQL": JobStateQueueEstimateSQL,
		"(NewJobInsert)":           "WITH j AS (" + NewJobInsert("(VALUES (1)) AS v(n)", "$1::jsonb", "$2::text", "$3::text", "$4::smallint") + ") SELECT id FROM j",
		"(UnfinishedJobExists)":    "SELECT " + UnfinishedJobExists("$1::bigint"),

		"QueuesPausedSQL":  QueuesPausedSQL,
		"ThroughputSQL":    ThroughputSQL,
		"JobListSQL":       JobListSQL,
		"JobKindsSQL":      JobKindsSQL,
		"vacuumAnalyzeSQL": vacuumAnalyzeSQL,
		"allVisibleSQL":    allVisibleSQL,

		"wakeSQL":                  wakeSQL,
		"limitUseSQL":              limitUseSQL,
		"admittingSQL":             admittingSQL,
		"admitLimitedSQL":          admitLimitedSQL,
		"limitOldestWaitingSQL":    limitOldestWaitingSQL,
		"limitCancelCandidatesSQL": limitCancelCandidatesSQL,
		"jobStartSpreadSQL":        jobStartSpreadSQL,
		"jobStateSQL":              jobStateSQL,
		"jobStatesSQL":             jobStatesSQL,
		"lockJobSQL":               lockJobSQL,
		"countJobsSQL":             countJobsSQL,
		"countJobsInStatesSQL":     countJobsInStatesSQL,
		"fireJobSQL":               fireJobSQL,
		"rescueRunningSQL":         rescueRunningSQL,
		"runningUnderSQL":          runningUnderSQL,
		"countByQueueStateSQL":     countByQueueStateSQL,
		"promoteSQL":               promoteSQL,
		"cancelUnstartedSQL":       cancelUnstartedSQL,
		"finalizeRunningSQL":       finalizeRunningSQL,
		"scanWorkflowTasksSQL":     scanWorkflowTasksSQL,
		"wakeSnoozedSQL":           wakeSnoozedSQL,
		"wakeDueSQL":               wakeDueSQL,

		"(promoteNextSQL)":             promoteNextSQL,
		"promoteHeadSQL":               promoteHeadSQL,
		"returnToPendingSQL":           returnToPendingSQL,
		"requeueGivenUpSQL":            requeueGivenUpSQL,
		"laneJobsAtSQL":                laneJobsAtSQL,
		"jobPlaceSQL":                  jobPlaceSQL,
		"cancelRequestedSQL":           cancelRequestedSQL,
		"(completeRunningSQL)":         completeRunningSQL,
		"claimAtHeadSQL":               claimAtHeadSQL,
		"(promoteAtHeadSQL)":           promoteAtHeadSQL,
		"giveBackSQL":                  giveBackSQL,
		"insertAttemptedSQL":           insertAttemptedSQL,
		"dispatchAttemptsSQL":          dispatchAttemptsSQL,
		"insertJobsSQL":                insertJobsSQL,
		"copyJobsSQL":                  copyJobsSQL,
		"copyLaneEventsSQL":            copyLaneEventsSQL,
		"jobRowsSQL":                   jobRowsSQL,
		"countUnfinishedDispatchesSQL": countUnfinishedDispatchesSQL,
		"deleteWaitingDispatchesSQL":   deleteWaitingDispatchesSQL,
		"countRunningDispatchesSQL":    countRunningDispatchesSQL,
	}
}
