// Package dashboard serves tributary's operator view over HTTP: server-rendered
// pages (overview, jobs, job detail, outbox, schedules, batches, AMQP queues),
// the same data as JSON under /api/, actions (retry, cancel, delete, replay,
// trigger, pause, resume) guarded by a bearer token, Prometheus metrics on
// /metrics, and /healthz and /readyz.
//
// The pages are Go html/template files and one CSS file embedded in the
// binary; there is no front-end build step and no JavaScript.
//
// Counts stay fast on large tables: every count is capped (an index range
// scan that stops after Config.CountCap rows) and a state or queue above the
// cap is shown with the planner's estimate, marked approximate, instead of a
// full count(*) on every request.
//
// Serve it on its own with New and its Handler (what `tributary dashboard`
// does), or inside a worker process with InstallWorker, where it also
// counts the jobs the process works (what `tributary worker --http ADDR`
// does); the examples show both.
//
// Without a token every action answers 403 and the dashboard is read-only.
// Actions are POST only; they take `Authorization: Bearer TOKEN`, or the
// session cookie set by the login form together with the form's CSRF token
// and a same-origin Origin/Referer.
package dashboard
