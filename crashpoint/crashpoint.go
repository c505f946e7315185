// Package crashpoint puts named places in the code where a test can make the
// process die, stall or fail, to prove that every crash leaves the system in
// a state it can recover from.
//
// The points sit at the exact lines they test, inside the product's code
// (between a provider call and its save, say), so they are compiled out
// rather than moved out: the package has two builds.
//
//   - Built without the lab tag (the product, as the Dockerfile builds it),
//     a *Set has no state and Hit always returns nil. Nothing can arm a
//     point: there is no Parse, and nothing reads the environment.
//   - Built with -tags lab (the laboratory: make run, make test, scenarios,
//     the benchmark), Parse arms points from a spec (arm.go), which cmd reads
//     from CHARGEFLOW_CRASHPOINTS.
//
// Either way a nil *Set is disarmed, so the code that hits a point is the
// same in both builds. docs/architecture.md ("The laboratory apart") says
// why it is a build tag.
package crashpoint

// The named points. A point is named after the last thing that happened
// before it.
const (
	APIAfterInsertBeforeCommit        = "api.after_insert_before_commit"
	APIAfterCommitBeforeResponse      = "api.after_commit_before_response"
	WorkerAfterSubmittingCommit       = "worker.after_submitting_commit"
	WorkerAfterPSPResponseBeforeSave  = "worker.after_psp_response_before_save"
	WorkerAfterSaveBeforeCommit       = "worker.after_save_before_commit"
	ReconcilerAfterLease              = "reconciler.after_lease"
	ReconcilerAfterLookupBeforeUpdate = "reconciler.after_lookup_before_update"
	// DeliveryBeforePost: a webhook delivery loaded, its event's move long
	// committed, nothing sent yet.
	DeliveryBeforePost = "delivery.before_post"
	// DeliveryAfterPostBeforeRecord: the receiver answered, the attempt is
	// not logged yet; the rerun delivers again, with the same webhook-id.
	DeliveryAfterPostBeforeRecord = "delivery.after_post_before_record"
)

// Names lists every point, so a typo in a spec is an error, not a silent no-op.
func Names() []string {
	return []string{
		APIAfterInsertBeforeCommit, APIAfterCommitBeforeResponse,
		WorkerAfterSubmittingCommit, WorkerAfterPSPResponseBeforeSave, WorkerAfterSaveBeforeCommit,
		ReconcilerAfterLease, ReconcilerAfterLookupBeforeUpdate,
		DeliveryBeforePost, DeliveryAfterPostBeforeRecord,
	}
}
