package fleet

import "strings"

// The roots of the appIds of the txn actions a site writes into a fleet
// table (docs/fleet.md, "What a fleet commit holds"):
//
//	lakeside-fleet/<site>/<table>/<kind>/<local table id>   its progress
//	lakeside-fleet-lsn/<site>/<table>/<kind>                its source position
//
// A site name holds no "/" (uploader.Config.Validate), nor does a
// table's directory name, so each part reads back unambiguously. The
// second root is not under the first: a site's own positions never count
// as its progress, nor trip the check that only its runs write its
// progress (Writer.learn).
const (
	progressRoot = "lakeside-fleet/"
	positionRoot = "lakeside-fleet-lsn/"
)

// Position is a site's source position in a fleet table, which a data
// commit carries beside its range (Range.Position): a txn action whose
// appId is the Writer's PositionAppID and whose version is the
// PostgreSQL end LSN of the last source transaction the fleet holds of
// the site's table. It is for people watching the fleet (ReadStatus):
// nothing in the commit loop reads it.
type Position struct {
	AppID   string
	Version int64
}

// PositionAppID returns the appId of the source position of the site's
// local table kind ("changelog" or "mirror"). Unlike AppID it names no
// local table: the position is the site's source's, whichever local
// table holds it.
func (w *Writer) PositionAppID(kind string) string {
	return w.positionPrefix() + w.log.table() + "/" + kind
}

func (w *Writer) positionPrefix() string { return positionRoot + w.site + "/" }

// parseProgressAppID splits the appId of a site's progress into its
// parts; ok is false for any other appId.
func parseProgressAppID(appID string) (site, table, kind, localID string, ok bool) {
	rest, ok := strings.CutPrefix(appID, progressRoot)
	if !ok {
		return "", "", "", "", false
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 4 || parts[0] == "" || parts[2] == "" {
		return "", "", "", "", false
	}
	return parts[0], parts[1], parts[2], parts[3], true
}

// parsePositionAppID splits the appId of a site's source position into
// its parts; ok is false for any other appId.
func parsePositionAppID(appID string) (site, table, kind string, ok bool) {
	rest, ok := strings.CutPrefix(appID, positionRoot)
	if !ok {
		return "", "", "", false
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 3 || parts[0] == "" || parts[2] == "" {
		return "", "", "", false
	}
	return parts[0], parts[1], parts[2], true
}
