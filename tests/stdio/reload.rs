//! `SIGHUP` loads the configuration again for a stdio host: the session goes on, hears
//! `list_changed`, and sees the new catalog; a broken file is refused and logged.

use serde_json::json;

use manifold_testkit::process::*;

#[test]
fn sighup_reloads_the_configuration_under_a_stdio_session() {
    let before = named_fixture("alpha");
    let mut m = Manifold::ready(&before);
    let path = m.dir.path().join("manifold.toml");
    let after = format!("{before}\n{}", named_fixture("beta"));
    std::fs::write(&path, after).unwrap();
    let pid = m.pid();
    send_signal(pid, "HUP");
    m.wait_for(|v| v["method"] == "notifications/tools/list_changed");
    assert!(m.all_tool_names().contains(&"beta__echo".to_owned()));
    assert_eq!(text_of(&m.call("beta__echo", json!({"text": "hi"}))), "hi");
    std::fs::write(&path, "[upstreams.alpha\n").unwrap();
    send_signal(pid, "HUP");
    eventually("the refusal is logged", || {
        m.stderr().contains("configuration reload refused (SIGHUP)")
    });
    assert_eq!(text_of(&m.call("alpha__echo", json!({"text": "on"}))), "on");
}
