//! A query's terms: the analyzed words the user wrote, each once, and the synonyms they
//! bring with a lower weight.

use std::collections::HashMap;
use std::sync::OnceLock;

use super::document::HINTS;
use super::score::QueryTerm;
use super::text;

/// What a synonym counts for against a word of the query itself.
const SYNONYM_WEIGHT: f32 = 0.4;

/// Groups of words that name the same action or thing in tool catalogs. A query word of a
/// group brings the others at `SYNONYM_WEIGHT`; documents are indexed as written. Only a
/// group's one-word members bring the others; a member of several words ("pull request") is
/// brought as its words.
const SYNONYMS: &[&[&str]] = &[
    // Actions.
    &["create", "make", "new", "add", "open"],
    &["add", "invite", "include"],
    &["append", "end"],
    &[
        "delete", "remove", "erase", "destroy", "trash", "discard", "drop", "forget",
    ],
    &["search", "find", "lookup", "look", "grep"],
    &["list", "show", "enumerate"],
    &[
        "get", "fetch", "retrieve", "read", "show", "view", "open", "see", "display",
    ],
    &[
        "update", "edit", "modify", "change", "alter", "rename", "rewrite",
    ],
    &["rename", "move"],
    &["move", "transfer", "relocate"],
    &["send", "post", "tell", "notify"],
    &["reply", "respond", "answer"],
    &["respond", "accept", "decline", "rsvp"],
    &["close", "resolve", "done", "solve", "finish", "complete"],
    &["run", "execute", "invoke", "trigger", "launch", "start"],
    &["stop", "kill", "terminate", "halt"],
    &["cancel", "abort"],
    &["upload", "put", "share", "attach"],
    &["download", "save"],
    &["save", "write", "store"],
    &["copy", "duplicate", "clone"],
    &["share", "grant"],
    &["assign", "give", "reassign"],
    &["schedule", "book", "arrange", "plan", "remind", "reminder"],
    &["review", "approve"],
    &["ask", "request"],
    &["switch", "checkout"],
    &["current", "active", "now"],
    &["latest", "recent", "newest", "last"],
    &["format", "bold", "italic", "style", "color"],
    &["undo", "revert", "reset", "rollback", "roll back"],
    &["restart", "reboot", "bounce"],
    &["scale", "resize", "replica"],
    &["deploy", "deployment", "ship", "publish", "release"],
    &["mute", "silence", "snooze"],
    &["acknowledge", "ack"],
    &["calculate", "compute", "evaluate", "math"],
    &["summary", "summarize", "summarise"],
    &["purge", "clear", "flush", "wipe", "invalidate"],
    &["prune", "clean", "cleanup"],
    &["deactivate", "suspend", "disable", "offboard"],
    &["navigate", "go", "visit", "browse"],
    &["click", "tap", "press"],
    &["type", "enter", "input", "fill"],
    &["select", "choose", "pick", "dropdown", "option"],
    &["hover", "mouse"],
    &["remember", "memorize", "memory", "recall", "know"],
    &["scrape", "fetch", "extract"],
    &["explain", "plan", "slow"],
    // Things.
    &["issue", "ticket", "bug", "story", "defect", "tracker"],
    &["pr", "mr", "pull request", "merge request"],
    &["repo", "repository"],
    &["label", "tag"],
    &["history", "log"],
    &["diff", "changes"],
    &["blame", "wrote", "author"],
    &["log", "output", "console"],
    &["error", "exception", "crash", "failure"],
    &["folder", "directory", "dir"],
    &["file", "document", "doc", "readme"],
    &["paragraph", "text", "sentence"],
    &["os", "operating system"],
    &["email", "mail", "message", "inbox"],
    &["meeting", "event", "appointment", "call"],
    &["contact", "person", "people"],
    &["channel", "room"],
    &["message", "post", "dm", "chat"],
    &["dm", "direct message"],
    &["page", "wiki"],
    &["note", "memo", "jot"],
    &["spreadsheet", "sheet", "workbook"],
    &["cell", "range"],
    &["row", "record", "entry"],
    &["task", "todo", "card"],
    &["board", "project"],
    &["object", "blob"],
    &["link", "url", "http", "https", "www", "webpage"],
    &["presigned", "temporary"],
    &["database", "db"],
    &["schema", "column", "structure", "field", "describe"],
    &["tree", "structure", "recursive"],
    &["metadata", "info", "details"],
    &["count", "many", "number", "total"],
    &["expire", "ttl"],
    &["similar", "semantic", "related"],
    &["vector", "embedding"],
    &["vm", "instance", "machine", "droplet", "ec2"],
    &["lambda", "function", "serverless"],
    &["bill", "cost", "spend", "billing"],
    &["kubernetes", "k8s", "kubectl", "cluster"],
    &["cname", "dns"],
    &["site", "website"],
    &["env", "environment"],
    &["incident", "outage"],
    &["alert", "monitor", "alarm"],
    &["secret", "password", "credential", "token"],
    &["user", "account", "member", "employee"],
    &["mfa", "2fa", "factor", "otp"],
    &["group", "team"],
    &["charge", "payment", "transaction"],
    &["invoice", "bill"],
    &["customer", "client"],
    &["order", "purchase"],
    &["fulfill", "ship", "deliver", "shipped"],
    &["stock", "inventory"],
    &["discount", "coupon", "promo"],
    &["deal", "opportunity"],
    &["lead", "prospect"],
    &["company", "organization", "org"],
    &["macro", "canned", "template"],
    &["flag", "toggle", "feature"],
    &["directions", "route"],
    &["coordinates", "geocode", "latitude", "longitude"],
    &["address", "location", "place"],
    &["weather", "forecast", "rain", "temperature", "snow"],
    &["flight", "plane", "airline", "fly"],
    &["time", "clock"],
    &["timezone", "time zone"],
    &["image", "picture", "photo", "img"],
    &["video", "clip"],
    &["transcript", "caption", "subtitle"],
    &["song", "track", "music", "tune"],
    &["skip", "next"],
    &["paper", "article", "study", "publication", "research"],
    &["documentation", "docs", "reference", "manual"],
    &["library", "package", "crate", "module"],
    &["version", "release"],
    &["screenshot", "capture", "snapshot"],
    &["javascript", "js", "script"],
    &["web", "internet", "online"],
    &["news", "headline"],
    &["process", "pid", "program"],
    &["top", "usage", "utilization"],
    &["shell", "terminal", "command", "bash", "cli"],
    &["container", "docker"],
    &["compose", "stack"],
    &["dashboard", "graph", "chart", "panel"],
    &["metric", "stat", "statistics", "measurement"],
    &["latency", "duration", "slow"],
    &["annotate", "annotation", "mark"],
    &["balance", "funds"],
];

/// The terms of `query`: its own, in order of first appearance, and each pair of adjacent
/// words written as one ("proton mail" also searches for "protonmail", as an upstream may be
/// called), then the annotation hints those name ("read only" asks for read-only tools) and
/// the synonyms of those terms (each term once, at the highest weight it gets).
pub(crate) fn terms(query: &str) -> Vec<QueryTerm> {
    let mut out: Vec<QueryTerm> = Vec::new();
    let words = text::words(query);
    let joined = words
        .windows(2)
        .map(|pair| format!("{}{}", pair[0], pair[1]));
    for term in text::terms_of(query)
        .into_iter()
        .chain(joined.flat_map(|w| text::terms_of(&w)))
    {
        if !out.iter().any(|q| q.term == term) {
            out.push(QueryTerm { term, weight: 1.0 });
        }
    }
    let own = out.len();
    for i in 0..own {
        let asked = HINTS.iter().find(|h| h.asked_by == out[i].term);
        if let Some(hint) = asked.filter(|h| !out.iter().any(|q| q.term == h.term)) {
            out.push(QueryTerm {
                term: hint.term.to_owned(),
                weight: 1.0,
            });
        }
        for synonym in synonyms_of(&out[i].term) {
            if !out.iter().any(|q| &q.term == synonym) {
                out.push(QueryTerm {
                    term: synonym.clone(),
                    weight: SYNONYM_WEIGHT,
                });
            }
        }
    }
    out
}

/// The analyzed terms of every other word of each group `term` belongs to as a single word.
fn synonyms_of(term: &str) -> &'static [String] {
    static TABLE: OnceLock<HashMap<String, Vec<String>>> = OnceLock::new();
    let table = TABLE.get_or_init(|| {
        let mut table: HashMap<String, Vec<String>> = HashMap::new();
        for group in SYNONYMS {
            let analyzed: Vec<Vec<String>> = group.iter().map(|w| text::terms_of(w)).collect();
            for (i, word) in analyzed.iter().enumerate() {
                let [single] = word.as_slice() else { continue };
                let entry = table.entry(single.clone()).or_default();
                let others = analyzed.iter().enumerate().filter(|&(j, _)| j != i);
                for term in others.flat_map(|(_, other)| other) {
                    if term != single && !entry.contains(term) {
                        entry.push(term.clone());
                    }
                }
            }
        }
        table
    });
    table.get(term).map_or(&[], Vec::as_slice)
}
