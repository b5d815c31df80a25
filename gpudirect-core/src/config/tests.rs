use super::*;

#[test]
fn a_profile_header_is_found_without_parsing() {
    let text = "# [profiles.commented]\n[profiles.tcpx]\nnet = \"x\"\n  [ profiles.gib.env ]\n[profiles.tcpxo_v2]\n";
    for name in ["tcpx", "gib", "tcpxo_v2"] {
        assert!(declares_profile(text, name), "{name}");
    }
    for name in ["tcp", "commented", "tcpxo", "", "a]", "profiles"] {
        assert!(!declares_profile(text, name), "{name}");
    }
    // Whatever the scan says, a parsed config agrees where the scan says yes.
    let shipped = include_str!("../../../slurm-conf/gpudirect.toml");
    let config = parse_config(shipped, "shipped").unwrap();
    for name in config.profile_names() {
        assert!(declares_profile(shipped, name), "{name}");
    }
}

#[test]
fn lines_from_the_newline_index_match_counting_newlines() {
    let text = "a = 1\n\n[profiles.x]\nb = \"\u{e9}\"\nc = 2";
    let checker = Checker {
        source: "t",
        newlines: newline_offsets(text),
    };
    for offset in 0..=text.len() + 2 {
        assert_eq!(checker.line_at(offset), line_of(text, offset), "{offset}");
    }
}

pub(crate) const SAMPLE: &str = r#"
[profiles.tcpx]
description = "test"
transport = "GPUDirectTCPX"
control_nic = "eth0"
data_nics = ["eth1", "eth2"]
gpu_nics = ["eth1", "eth1", "eth2", "eth2"]
library_dirs = ["/var/lib/tcpx/lib64"]
pin_cpus = true
forced = ["NCCL_NET"]
[profiles.tcpx.nic_cpus]
eth1 = "0-3"
eth2 = "4-7"
[profiles.tcpx.env]
NCCL_NET = "GPUDirectTCPX_v7"
NCCL_SOCKET_IFNAME = "{control_nic}"
PREFIX = "/run/tcpx-{job_id}"
[profiles.tcpx.checks]
nics = true
libraries = ["libnccl-net.so"]
rxdm_socket_dir = "/run/tcpx-{job_id}"

[[node_set]]
name = "a3"
hosts = "a3h-[001-008]"
profile = "tcpx"
nic_names = { eth0 = "enp0s12" }
"#;

/// The error of a config with one mistake, which `profiles check` reports alone: no
/// second error about the same mistake.
fn err(text: &str) -> ConfigError {
    let e = first_err(text);
    let all = config_errors(text, "/etc/slurm/gpudirect.toml").unwrap_err();
    assert_eq!(all, std::slice::from_ref(&e), "{text}");
    e
}

/// The first error of a config (the one `profiles check` reports first).
fn first_err(text: &str) -> ConfigError {
    match parse_config(text, "/etc/slurm/gpudirect.toml") {
        Err(e) => {
            let all = config_errors(text, "/etc/slurm/gpudirect.toml").unwrap_err();
            assert_eq!(all[0], e, "{text}");
            e
        }
        Ok(_) => panic!("config was accepted:\n{text}"),
    }
}

/// A config with ten mistakes, and two keys that are wrong only because of another.
const MANY_MISTAKES: &str = r#"default_mode = "broken"
[profiles.tcpx]
data_nics = ["eth1", "eth2"]
gpu_nics = ["eth1", "eth3"]
library_dirs = ["lib64"]
[profiles.tcpx.env]
lower = "x"
LD_PRELOAD = "/x.so"
NCCL_NET = "ok"
[profiles.typo]
data_nic = ["eth1"]
gpu_nics = ["eth1"]
[profiles.broken]
data_nics = ["eth 1"]
gpu_nics = ["eth9"]
[ras]
port_base = 80
[[node_set]]
name = "a"
hosts = "a[1-"
profile = "broken"
skip_checks = ["nics", "bogus"]
[[node_set]]
name = "b"
hosts = "b1"
profile = "nosuch"
"#;

#[test]
fn every_error_of_a_config_is_found_with_its_line_and_key() {
    let all = config_errors(MANY_MISTAKES, "g.toml").unwrap_err();
    let line = |start: &str| {
        MANY_MISTAKES
            .lines()
            .position(|l| l.starts_with(start))
            .map(|i| i + 1)
            .unwrap()
    };
    let found: Vec<(usize, Option<&str>)> = all
        .iter()
        .map(|e| (e.line.unwrap(), e.key.as_deref()))
        .collect();
    assert_eq!(
        found,
        [
            // serde's: the unknown key, found first, as `parse_config` reports it.
            (line("data_nic ="), None),
            (
                line("data_nics = [\"eth 1"),
                Some("profiles.broken.data_nics")
            ),
            (
                line("gpu_nics = [\"eth1\", \"eth3"),
                Some("profiles.tcpx.gpu_nics")
            ),
            (line("library_dirs"), Some("profiles.tcpx.library_dirs")),
            (line("LD_PRELOAD"), Some("profiles.tcpx.env.LD_PRELOAD")),
            (line("lower"), Some("profiles.tcpx.env.lower")),
            (line("port_base"), Some("ras.port_base")),
            (line("hosts = \"a[1-"), Some("node_set[0] (a).hosts")),
            (line("skip_checks"), Some("node_set[0] (a).skip_checks")),
            (line("profile = \"nosuch"), Some("node_set[1] (b).profile")),
        ],
        "{all:#?}"
    );
    assert_eq!(all[0], parse_config(MANY_MISTAKES, "g.toml").unwrap_err());
    assert!(
        all[0].message.contains("unknown field `data_nic`"),
        "{}",
        all[0]
    );
    // Each says what to do.
    assert!(
        all[1].message.contains("not an interface name"),
        "{}",
        all[1]
    );
    assert!(
        all[2]
            .message
            .contains("`eth3` is not one of data_nics (eth1, eth2)"),
        "{}",
        all[2]
    );
    assert!(all[9].message.contains("no profile `nosuch`"), "{}", all[9]);
}

#[test]
fn a_config_without_serde_errors_has_its_check_errors_first_one_first() {
    // The same mistakes less the unknown key: the checks' errors, the first of them
    // the one `parse_config` gives.
    let text = MANY_MISTAKES.replace("data_nic = [\"eth1\"]\n", "");
    let all = config_errors(&text, "g.toml").unwrap_err();
    assert_eq!(all[0], parse_config(&text, "g.toml").unwrap_err());
    assert_eq!(all.len(), 10, "{all:#?}");
    // Now the profile's gpu_nics is its own mistake.
    assert!(all
        .iter()
        .any(|e| e.key.as_deref() == Some("profiles.typo.gpu_nics")));
}

#[test]
fn a_right_config_reads_the_same_and_a_syntax_error_is_one_error() {
    let config = config_errors(SAMPLE, "t.toml").unwrap();
    assert_eq!(
        config.profiles["tcpx"],
        parse_config(SAMPLE, "t.toml").unwrap().profiles["tcpx"]
    );
    let broken = format!("{SAMPLE}\n[profiles.x\nkey = 1\n[ras]\nport_base = 1\n");
    let all = config_errors(&broken, "t.toml").unwrap_err();
    assert_eq!(all, [parse_config(&broken, "t.toml").unwrap_err()]);
}

#[test]
fn reads_a_full_profile() {
    let config = parse_config(SAMPLE, "t.toml").unwrap();
    let tcpx = &config.profiles["tcpx"];
    assert_eq!(tcpx.data_nics, ["eth1", "eth2"]);
    assert!(tcpx.pin_cpus);
    assert_eq!(tcpx.nic_cpus["eth2"].to_string(), "4-7");
    let net = tcpx.env.iter().find(|v| v.name == "NCCL_NET").unwrap();
    assert!(net.forced);
    assert_eq!(net.line, 15);
    assert_eq!(
        tcpx.lines,
        ProfileLines {
            name: 2,
            data_nics: Some(6),
            library_dirs: Some(8),
            topology_file: None,
            check_libraries: Some(20),
        }
    );
    assert_eq!(config.node_sets[0].line, 23);
    assert_eq!(
        tcpx.checks.required(),
        vec![
            CheckKind::Nics,
            CheckKind::Libraries,
            CheckKind::RxdmSocketDir
        ]
    );
    let set = config.node_set_for("a3h-005").unwrap();
    assert_eq!(set.profile.as_deref(), Some("tcpx"));
    assert!(config.node_set_for("a3h-009").is_none());
}

/// `line_rate_gbit` (issue #18): one number for every data NIC or a table per NIC;
/// a node's line rate is their sum in GB/s. Bad values name the key and the fix.
#[test]
fn line_rates_are_read_and_checked() {
    let with = |rate: &str| {
        SAMPLE.replace(
            "pin_cpus = true\n",
            &format!("pin_cpus = true\nline_rate_gbit = {rate}\n"),
        )
    };
    let config = parse_config(&with("200"), "t.toml").unwrap();
    assert_eq!(config.profiles["tcpx"].node_line_rate_gbps(), Some(50.0));
    let config = parse_config(&with("{ eth1 = 400, eth2 = 100 }"), "t.toml").unwrap();
    assert_eq!(config.profiles["tcpx"].line_rate_gbit["eth2"], 100);
    assert_eq!(config.profiles["tcpx"].node_line_rate_gbps(), Some(62.5));
    let plain = parse_config(SAMPLE, "t.toml").unwrap();
    assert_eq!(plain.profiles["tcpx"].node_line_rate_gbps(), None);
    for (rate, problem) in [
        ("0", "must be a whole number of Gbit/s above 0"),
        ("\"fast\"", "must be a whole number of Gbit/s above 0"),
        ("12.5", "must be a whole number of Gbit/s above 0"),
        (
            "{ eth1 = 200 }",
            "no rate for eth2: give every data NIC its rate",
        ),
        (
            "{ eth1 = 200, eth2 = 200, eth9 = 1 }",
            "`eth9` is not one of data_nics",
        ),
        ("{ eth1 = 200, eth2 = -5 }", "the rate of eth2 must be"),
    ] {
        let e = err(&with(rate));
        assert_eq!(
            e.key.as_deref(),
            Some("profiles.tcpx.line_rate_gbit"),
            "{rate}"
        );
        assert!(e.message.contains(problem), "{rate}: {}", e.message);
        assert_eq!(e.line, Some(10), "{rate}");
    }
}

#[test]
fn parses_modes() {
    let config = parse_config(SAMPLE, "t.toml").unwrap();
    assert_eq!(config.parse_mode("none"), Ok(Mode::None));
    assert_eq!(config.parse_mode("auto"), Ok(Mode::Auto));
    assert_eq!(config.parse_mode("tcpx"), Ok(Mode::Profile("tcpx".into())));
    let e = config.parse_mode("tcpxo").unwrap_err();
    assert_eq!(
        e.to_string(),
        "unknown --gpudirect mode `tcpxo`: use `auto`, `none` or a profile (tcpx)"
    );
    let long = "x".repeat(10_000);
    assert!(config.parse_mode(&long).unwrap_err().mode.len() < 80);
    assert_eq!(config.parse_mode("a;$(id)\n").unwrap_err().mode, "a;$(id)?");
}

#[test]
fn syntax_errors_name_file_and_line() {
    let e = err("[profiles.x]\nstrict = tru\n");
    assert_eq!(e.file, "/etc/slurm/gpudirect.toml");
    assert_eq!(e.line, Some(2));
}

#[test]
fn unknown_keys_are_errors() {
    let e = err("[profiles.x]\nstrictt = true\n");
    assert_eq!(e.line, Some(2));
    assert!(e.message.contains("strictt"), "{e}");
    let e = err("defaults_mode = \"auto\"\n");
    assert!(e.message.contains("defaults_mode"), "{e}");
}

#[test]
fn semantic_errors_name_line_and_key() {
    let cases: &[(&str, usize, &str, &str)] = &[
        (
            "[profiles.x.env]\nLD_PRELOAD = \"/home/m/x.so:\"\n",
            2,
            "profiles.x.env.LD_PRELOAD",
            "the plugin sets no LD_* variable but LD_LIBRARY_PATH",
        ),
        (
            "[ras]\nport_base = 80\n",
            2,
            "ras.port_base",
            "80 is no port for a job's RAS: write a number from 1024 to 65535",
        ),
        (
            "[ras]\nport_span = 0\n",
            2,
            "ras.port_span",
            "0 is no count of ports: write a number from 1 to 65535",
        ),
        (
            "[ras]\nport_base = 65000\nport_span = 900\n",
            3,
            "ras.port_span",
            "ports 65000 to 65899 end past 65535",
        ),
        (
            "[profiles.x.env]\nA = \"{jobid}\"\n",
            2,
            "profiles.x.env.A",
            "unknown placeholder",
        ),
        (
            "[profiles.x]\ngpu_nics = [\"eth9\"]\n",
            2,
            "profiles.x.gpu_nics",
            "not one of data_nics",
        ),
        (
            "[profiles.x]\nlibrary_dirs = [\"lib\"]\n",
            2,
            "profiles.x.library_dirs",
            "absolute",
        ),
        (
            "[profiles.x]\nlibrary_dirs = [\"/a/../b\"]\n",
            2,
            "profiles.x.library_dirs",
            "absolute",
        ),
        (
            "[profiles.x]\nforced = [\"B\"]\n",
            2,
            "profiles.x.forced",
            "not a variable",
        ),
        (
            "[profiles.x.env]\nLD_LIBRARY_PATH = \"/x\"\n",
            2,
            "profiles.x.env.LD_LIBRARY_PATH",
            "library_dirs",
        ),
        (
            "[profiles.x.env]\nGPUDIRECT_NIC = \"x\"\n",
            2,
            "profiles.x.env.GPUDIRECT_NIC",
            "plugin itself",
        ),
        (
            "[profiles.x.env]\nlower = \"x\"\n",
            2,
            "profiles.x.env.lower",
            "uppercase",
        ),
        ("[profiles.none]\n", 1, "profiles.none", "built-in"),
        ("[profiles.X]\n", 1, "profiles.X", "lowercase"),
        (
            "\n[profiles.x.checks]\nnics = true\n",
            2,
            "profiles.x.checks.nics",
            "no NICs",
        ),
        (
            "[profiles.x]\npin_cpus = true\n",
            2,
            "profiles.x.pin_cpus",
            "needs gpu_nics",
        ),
        (
            "[profiles.x]\ndata_nics = [\"eth1\"]\n[profiles.x.nic_cpus]\neth1 = \"3-1\"\n",
            4,
            "profiles.x.nic_cpus.eth1",
            "backwards",
        ),
        (
            "[profiles.x]\ncontrol_nic = \"eth0;rm\"\n",
            2,
            "profiles.x.control_nic",
            "interface name",
        ),
        (
            "[profiles.x.checks]\nlibraries = [\"../x.so\"]\n",
            2,
            "profiles.x.checks.libraries",
            "file name",
        ),
        (
            "[profiles.x.checks]\nlibraries = [\"x.so\"]\n",
            2,
            "profiles.x.checks.libraries",
            "library_dirs",
        ),
        (
            "[profiles.x.checks]\ntopology_file = true\n",
            2,
            "profiles.x.checks.topology_file",
            "no topology_file",
        ),
        (
            "[profiles.x.checks]\nrxdm_socket_dir = \"run/x\"\n",
            2,
            "profiles.x.checks.rxdm_socket_dir",
            "absolute",
        ),
        (
            "[profiles.x.env]\nNCCL_NET_PLUGIN = \"/opt/net/{gpu}/libnccl-net.so\"\n",
            2,
            "profiles.x.env.NCCL_NET_PLUGIN",
            "loads code, and {gpu} makes it another path",
        ),
        (
            "[profiles.x.checks]\nrxdm_socket_dir = \"/run/tcpx-{job_id}-{gpu}\"\n",
            2,
            "profiles.x.checks.rxdm_socket_dir",
            "one per job and node",
        ),
        (
            "[profiles.x.env]\nA = \"{nic:eth1}\"\n",
            2,
            "profiles.x.env.A",
            "does not declare",
        ),
        (
            "default_mode = \"tcpx\"\n",
            1,
            "default_mode",
            "unknown --gpudirect mode",
        ),
        (
            "[[node_set]]\nname = \"a\"\nhosts = \"n[1-\"\n",
            3,
            "node_set[0] (a).hosts",
            "",
        ),
        (
            "[[node_set]]\nname = \"a\"\nhosts = \"n1\"\nprofile = \"zz\"\n",
            4,
            "node_set[0] (a).profile",
            "no profile",
        ),
        (
            "[[node_set]]\nname = \"a\"\nhosts = \"n1\"\nskip_checks = [\"nic\"]\n",
            4,
            "node_set[0] (a).skip_checks",
            "unknown check `nic` (checks: nics, libraries, topology_file, rxdm_socket_dir, nic_speed, gpus, nic_counters)",
        ),
        (
            "[nic_counters]\nstate_dir = \"var/lib/gpudirect\"\n",
            2,
            "nic_counters.state_dir",
            "must be an absolute path",
        ),
        (
            "[quarantine]\nreservation = \"gd quarantine\"\n",
            2,
            "quarantine.reservation",
            "write a reservation name of letters, digits",
        ),
        (
            "[quarantine]\nusers = []\n",
            2,
            "quarantine.users",
            "name at least one user",
        ),
        (
            "[quarantine]\nusers = [\"root\", \"-x,bob\"]\n",
            2,
            "quarantine.users",
            "is no user name Slurm takes",
        ),
        (
            "[quarantine]\npasses_to_return = 0\n",
            2,
            "quarantine.passes_to_return",
            "0 is no count of sweeps: write a number from 1 to 100",
        ),
        (
            "[nic_counters.per_minute]\nsymbol = 0\n",
            2,
            "nic_counters.per_minute.symbol",
            "unknown class of counters (classes: link, physical, errors, drops, retransmits)",
        ),
        (
            "[nic_counters]\nper_minute = { drops = -1 }\n",
            2,
            "nic_counters.per_minute.drops",
            "-1 is no rise per minute",
        ),
    ];
    for (text, line, key, needle) in cases {
        let e = err(text);
        assert_eq!(e.line, Some(*line), "{text}: {e}");
        assert_eq!(e.key.as_deref(), Some(*key), "{text}: {e}");
        assert!(e.message.contains(needle), "{text}: {e}");
    }
}

/// `[quarantine]`: absent or bare, the defaults; written keys the admin's.
#[test]
fn quarantine_takes_its_defaults_and_the_admins_settings() {
    let none = parse_config("", "t.toml").unwrap().quarantine;
    assert_eq!(none, QuarantineSettings::default());
    assert_eq!(none.reservation, "gpudirect-quarantine");
    assert_eq!(none.users, ["root"]);
    assert!(!none.instead_of_drain);
    assert_eq!((none.passes_to_return, none.failures_to_drain), (2, 3));
    let text = "[quarantine]\nreservation = \"gd.q_1\"\nusers = [\"root\", \"slurm\"]\ninstead_of_drain = true\npasses_to_return = 3\nfailures_to_drain = 5\n";
    let set = parse_config(text, "t.toml").unwrap().quarantine;
    assert_eq!(set.reservation, "gd.q_1");
    assert_eq!(set.users, ["root", "slurm"]);
    assert!(set.instead_of_drain);
    assert_eq!((set.passes_to_return, set.failures_to_drain), (3, 5));
}

/// `[nic_counters]`: absent, the check is off; present, every class has its limit, the
/// written ones the admin's, the rest their defaults.
#[test]
fn nic_counters_take_their_defaults_and_the_admins_limits() {
    let none = parse_config("", "t.toml").unwrap();
    assert_eq!(none.nic_counters, None);
    let bare = parse_config("[nic_counters]\n", "t.toml").unwrap();
    let bare = bare.nic_counters.unwrap();
    assert_eq!(bare, NicCounterSettings::default());
    assert_eq!(bare.state_dir, "/var/lib/gpudirect");
    assert_eq!(bare.limit(CounterClass::Link), 0);
    assert_eq!(bare.limit(CounterClass::Physical), 0);
    assert_eq!(bare.limit(CounterClass::Drops), 100);
    let text = "[nic_counters]\nstate_dir = \"/srv/gd\"\n[nic_counters.per_minute]\ndrops = 5000\nphysical = 3\n";
    let set = parse_config(text, "t.toml").unwrap().nic_counters.unwrap();
    assert_eq!(set.state_dir, "/srv/gd");
    assert_eq!(set.limit(CounterClass::Drops), 5000);
    assert_eq!(set.limit(CounterClass::Physical), 3);
    assert_eq!(set.limit(CounterClass::Errors), 10);
    // A node set may skip the check.
    let skip = "[profiles.p]\n[[node_set]]\nname = \"a\"\nhosts = \"n1\"\nprofile = \"p\"\nskip_checks = [\"nic_counters\"]\n";
    let config = parse_config(skip, "t.toml").unwrap();
    assert_eq!(config.node_sets[0].skip_checks, [CheckKind::NicCounters]);
    // The shipped config's commented table, uncommented, is the defaults it says it is.
    let shipped = include_str!("../../../slurm-conf/gpudirect.toml");
    let block: String = shipped
        .lines()
        .skip_while(|l| *l != "# [nic_counters]")
        .take_while(|l| l.starts_with('#'))
        .map(|l| format!("{}\n", l.trim_start_matches("# ")))
        .collect();
    assert!(block.contains("retransmits"), "{block}");
    let uncommented = parse_config(&block, "shipped").unwrap().nic_counters;
    assert_eq!(uncommented, Some(NicCounterSettings::default()));
    let unknown = err("[nic_counters]\nlimit = 3\n");
    assert!(
        unknown.message.contains("unknown field `limit`"),
        "{unknown}"
    );
    assert_eq!(unknown.line, Some(2));
}

#[test]
fn error_display_is_one_line_with_location() {
    let e = err("[profiles.x]\ngpu_nics = [\"eth9\"]\n");
    let shown = e.to_string();
    assert!(
        shown.starts_with("/etc/slurm/gpudirect.toml:2: profiles.x.gpu_nics: "),
        "{shown}"
    );
    assert!(!shown.contains('\n'));
}

/// Found by `scripts/fuzz config`: the toml crate's (0.8) message for a bad table
/// header was two lines ("invalid table header\nexpected `.`, `]`"), so the error, which
/// the plugin logs as one line, was not. toml 1 words it on one line; `one_line` still
/// joins whatever a parser version says.
#[test]
fn regression_fuzz_config_multiline_toml_error() {
    let e = parse_config("[a b]\n", "fuzz.toml").unwrap_err();
    let shown = e.to_string();
    assert!(!shown.contains('\n'), "{shown:?}");
    assert!(shown.starts_with("fuzz.toml:1: "), "{shown}");
    assert!(shown.contains("expected `]`"), "{shown}");
    assert_eq!(
        one_line("invalid table header\nexpected `.`, `]`\n"),
        "invalid table header; expected `.`, `]`"
    );
}

/// A key the admin wrote with an escaped line break (`"a\nb"`) reaches the error's key
/// and message: it is shown escaped, so the error stays one line.
#[test]
fn regression_fuzz_config_control_char_in_key() {
    let e = parse_config("[profiles.\"a\\nb\"]\n", "fuzz.toml").unwrap_err();
    let shown = e.to_string();
    assert!(!shown.contains('\n'), "{shown:?}");
    assert_eq!(e.key.as_deref(), Some("profiles.a\\nb"), "{shown}");
}

/// Found by `scripts/fuzz config`: a node set named `"cp\nu"` was accepted, and its
/// name reached users' one-line messages (`--gpudirect=auto: node set cp` / `u ...`).
#[test]
fn regression_fuzz_config_control_char_in_node_set_name() {
    let text = "[[node_set]]\nname = \"cp\\nu\"\nhosts = \"login[3-4]\"\n";
    let e = parse_config(text, "fuzz.toml").unwrap_err();
    let shown = e.to_string();
    assert!(!shown.contains('\n'), "{shown:?}");
    assert_eq!(e.line, Some(1), "{shown}");
    assert_eq!(e.key.as_deref(), Some("node_set[0] (cp?u).name"), "{shown}");
    let blank = parse_config("[[node_set]]\nname = \" \"\nhosts = \"n1\"\n", "t.toml");
    assert!(blank.is_err());
}

/// Found with the `config` target's failing-probe check: names of libraries and paths
/// are printed in check failures, one line per node; control characters are refused.
#[test]
fn regression_fuzz_config_control_char_in_paths() {
    let base = "[profiles.p]\ncontrol_nic = \"eth0\"\nlibrary_dirs = [\"/lib\"]\n";
    for (extra, key) in [
        (
            "[profiles.p.checks]\nlibraries = [\"a\\rb.so\"]\n",
            "profiles.p.checks.libraries",
        ),
        (
            "topology_file = \"/t\\u001b[2Jx\"\n",
            "profiles.p.topology_file",
        ),
        (
            "[profiles.p.checks]\nrxdm_socket_dir = \"/run/\\tx\"\n",
            "profiles.p.checks.rxdm_socket_dir",
        ),
    ] {
        let e = parse_config(&format!("{base}{extra}"), "t.toml").unwrap_err();
        assert_eq!(e.key.as_deref(), Some(key), "{extra}: {e}");
        assert!(!e.to_string().contains(['\n', '\r', '\u{1b}']), "{e}");
    }
    let lib_dir = "[profiles.p]\ncontrol_nic = \"eth0\"\nlibrary_dirs = [\"/l\\tib\"]\n";
    let e = parse_config(lib_dir, "t.toml").unwrap_err();
    assert_eq!(e.key.as_deref(), Some("profiles.p.library_dirs"), "{e}");
}

#[test]
fn shipped_configs_parse() {
    let shipped = include_str!("../../../slurm-conf/gpudirect.toml");
    let local = include_str!("../../../slurm-conf/local-cluster.toml");
    let config = parse_config(&format!("{shipped}{local}"), "shipped").unwrap();
    let tcpx = &config.profiles["tcpx"];
    assert_eq!(tcpx.transport.as_deref(), Some("GPUDirectTCPX"));
    assert_eq!(tcpx.env.len(), 20);
    assert_eq!(
        config.node_set_for("a3h-0007").unwrap().nic_names["eth1"],
        "enp6s0"
    );
    assert_eq!(
        config.node_set_for("cpu-042").unwrap().default_mode,
        Some(Mode::None)
    );
    let local_set = config.node_set_for("node2").unwrap();
    assert_eq!(
        local_set.skip_checks,
        [
            CheckKind::Libraries,
            CheckKind::RxdmSocketDir,
            CheckKind::NicSpeed,
            CheckKind::Gpus
        ]
    );
    assert_eq!(tcpx.node_line_rate_gbps(), Some(100.0));
    assert_eq!(
        config.profile_names(),
        [
            "azure-ndv5",
            "efa",
            "gib",
            "gib-a4",
            "ib",
            "socket",
            "tcpx",
            "tcpxo"
        ]
    );
    let tcpxo = &config.profiles["tcpxo"];
    assert_eq!(tcpxo.transport.as_deref(), Some("FasTrak"));
    assert_eq!(tcpxo.data_nics.len(), 8);
    assert_eq!(tcpxo.env.len(), 22);
    assert_eq!(tcpxo.nic_locality, NicLocality::Sysfs);
    assert_eq!(tcpxo.library_dirs, ["/var/lib/tcpxo/lib64"]);
    let mega = config.node_set_for("a3m-0042").unwrap();
    assert_eq!(mega.profile.as_deref(), Some("tcpxo"));
    assert_eq!(mega.nic_names["eth8"], "enp142s0");
    assert_eq!(
        config.node_set_for("a3m-cos-0042").unwrap().name,
        "a3-mega-cos"
    );
    for name in ["gib", "gib-a4"] {
        let gib = &config.profiles[name];
        assert_eq!(gib.transport.as_deref(), Some("gIB"));
        assert_eq!(gib.data_nic_class, NicClass::Infiniband);
        assert_eq!(gib.library_dirs, ["/usr/local/gib/lib64"]);
    }
    let efa = &config.profiles["efa"];
    assert_eq!(efa.transport.as_deref(), Some("Libfabric"));
    assert!(efa.env.iter().any(|v| v.name == "FI_PROVIDER"));
    let ib = &config.profiles["ib"];
    assert_eq!(ib.data_nic_class, NicClass::Infiniband);
    assert_eq!(ib.data_nics[0], "mlx5_0");
    let azure = &config.profiles["azure-ndv5"];
    assert_eq!(
        azure.topology_file.as_deref(),
        Some("/opt/microsoft/ndv5-topo.xml")
    );
    assert!(azure.checks.topology_file);
    // The local cluster's node set still comes last and still parses.
    assert_eq!(config.node_sets.last().unwrap().name, "local");
}

#[test]
fn nic_class_and_locality_are_checked() {
    let config = parse_config(
        "[profiles.ib]\ndata_nic_class = \"infiniband\"\ndata_nics = [\"mlx5_0\"]\nnic_locality = \"sysfs\"\npin_cpus = true\n",
        "t.toml",
    )
    .unwrap();
    let ib = &config.profiles["ib"];
    assert_eq!(ib.data_nic_class, NicClass::Infiniband);
    assert_eq!(ib.nic_locality, NicLocality::Sysfs);
    assert!(ib.pin_cpus, "sysfs gives the CPUs: no nic_cpus needed");
    let defaults = parse_config("[profiles.p]\n", "t.toml").unwrap();
    assert_eq!(defaults.profiles["p"].data_nic_class, NicClass::Net);
    assert_eq!(defaults.profiles["p"].nic_locality, NicLocality::Config);
    let e = err("[profiles.x]\n\ndata_nic_class = \"rdma\"\n");
    assert_eq!(e.line, Some(3));
    assert_eq!(e.key.as_deref(), Some("profiles.x.data_nic_class"));
    assert!(e.message.contains("\"infiniband\""), "{e}");
    let e = err("[profiles.x]\nnic_locality = \"pci\"\n");
    assert_eq!(e.line, Some(2));
    assert_eq!(e.key.as_deref(), Some("profiles.x.nic_locality"));
    assert!(e.message.contains("\"sysfs\""), "{e}");
}

/// A base with every key `SAMPLE`'s tcpx leaves out.
const OTHER_KEYS: &str = r#"
[profiles.rdma]
strict = true
data_nic_class = "infiniband"
nic_locality = "sysfs"
data_nics = ["mlx5_0", "mlx5_1"]
line_rate_gbit = 400
topology_file = "/etc/topo.xml"
[profiles.rdma.checks]
topology_file = true
"#;

/// `extends` alone: the profile is its base but for its name and where that is written.
#[test]
fn extends_inherits_every_key_it_does_not_write() {
    let text = format!(
        "{SAMPLE}{OTHER_KEYS}\n[profiles.tcpx-copy]\nextends = \"tcpx\"\n[profiles.rdma-copy]\nextends = \"rdma\"\n"
    );
    let config = parse_config(&text, "t.toml").unwrap();
    for (base, copy, line) in [("tcpx", "tcpx-copy", 39), ("rdma", "rdma-copy", 41)] {
        let base = &config.profiles[base];
        let copy = &config.profiles[copy];
        assert_eq!(copy.extends.as_deref(), Some(base.name.as_str()));
        assert_eq!(copy.lines.name, line);
        let mut as_base = copy.clone();
        as_base.name = base.name.clone();
        as_base.extends = None;
        as_base.lines.name = base.lines.name;
        assert_eq!(&as_base, base, "{copy:#?}");
    }
    assert!(config.profiles["rdma-copy"].strict);
    assert_eq!(
        config.profiles["tcpx-copy"].lines.data_nics,
        Some(6),
        "an inherited key's line is the base's"
    );
}

#[test]
fn a_key_the_profile_writes_replaces_the_bases() {
    let text = format!(
        "{SAMPLE}\n[profiles.one-nic]\nextends = \"tcpx\"\ndescription = \"one NIC\"\nstrict = true\ntransport = \"Socket\"\ndata_nics = [\"eth1\"]\ngpu_nics = [\"eth1\"]\nnic_cpus = {{ eth1 = \"0-1\" }}\n[profiles.one-nic.checks]\nnics = true\n"
    );
    let config = parse_config(&text, "t.toml").unwrap();
    let tcpx = &config.profiles["tcpx"];
    let one = &config.profiles["one-nic"];
    assert_eq!(one.description, "one NIC");
    assert!(one.strict);
    assert_eq!(one.transport.as_deref(), Some("Socket"));
    assert_eq!(one.data_nics, ["eth1"]);
    assert_eq!(one.gpu_nics, ["eth1"]);
    assert_eq!(one.nic_cpus.len(), 1);
    assert_eq!(one.nic_cpus["eth1"].to_string(), "0-1");
    // `checks` is one key: written, it replaces the base's table whole.
    assert_eq!(one.checks.required(), [CheckKind::Nics]);
    assert_eq!(one.lines.data_nics, Some(34));
    assert_eq!(one.lines.check_libraries, None);
    // What it does not write is tcpx's.
    assert_eq!(one.control_nic, tcpx.control_nic);
    assert_eq!(one.library_dirs, tcpx.library_dirs);
    assert!(one.pin_cpus);
    assert_eq!(one.env, tcpx.env);
    // `false` written is written: it is not "left out".
    let text = format!("{SAMPLE}\n[profiles.loose]\nextends = \"tcpx\"\npin_cpus = false\n");
    let config = parse_config(&text, "t.toml").unwrap();
    assert!(!config.profiles["loose"].pin_cpus);
}

#[test]
fn env_merges_by_name_and_the_extending_profiles_values_win() {
    let text = format!(
        "{SAMPLE}\n[profiles.tuned]\nextends = \"tcpx\"\n[profiles.tuned.env]\nNCCL_NET = \"GPUDirectTCPX_v8\"\nNCCL_MIN_NCHANNELS = \"32\"\n"
    );
    let config = parse_config(&text, "t.toml").unwrap();
    let tuned = &config.profiles["tuned"];
    let var = |name: &str| tuned.env.iter().find(|v| v.name == name).unwrap();
    let names: Vec<&str> = tuned.env.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "NCCL_MIN_NCHANNELS",
            "NCCL_NET",
            "NCCL_SOCKET_IFNAME",
            "PREFIX"
        ]
    );
    assert_eq!(
        var("NCCL_NET").value,
        Template::parse("GPUDirectTCPX_v8").unwrap()
    );
    assert_eq!(
        var("NCCL_NET").line,
        32,
        "the override's line, not the base's"
    );
    assert!(
        var("NCCL_NET").forced,
        "tcpx forces it; the override stays forced"
    );
    assert_eq!(
        var("NCCL_MIN_NCHANNELS").value,
        Template::parse("32").unwrap()
    );
    assert_eq!(var("NCCL_MIN_NCHANNELS").line, 33);
    assert!(!var("NCCL_MIN_NCHANNELS").forced);
    assert_eq!(var("PREFIX").line, 17, "inherited: the base's line");
    assert_eq!(
        config.profiles["tcpx"].env.len(),
        3,
        "the base is left as it was"
    );
}

#[test]
fn forced_is_the_union_of_both_lists() {
    let text = format!(
        "{SAMPLE}\n[profiles.tuned]\nextends = \"tcpx\"\nforced = [\"PREFIX\", \"NEW\"]\n[profiles.tuned.env]\nNEW = \"1\"\n"
    );
    let config = parse_config(&text, "t.toml").unwrap();
    let forced: Vec<&str> = config.profiles["tuned"]
        .env
        .iter()
        .filter(|v| v.forced)
        .map(|v| v.name.as_str())
        .collect();
    assert_eq!(forced, ["NCCL_NET", "NEW", "PREFIX"]);
    // A forced name is checked against the merged [env].
    let e = err(&format!(
        "{SAMPLE}\n[profiles.tuned]\nextends = \"tcpx\"\nforced = [\"NOPE\"]\n"
    ));
    assert_eq!(e.key.as_deref(), Some("profiles.tuned.forced"));
    assert_eq!(e.line, Some(31));
}

#[test]
fn extends_errors_name_the_key_and_the_fix() {
    let base = "[profiles.base]\ntransport = \"X\"\n";
    let cases: &[(&str, &str)] = &[
        (
            "[profiles.tuned]\nextends = \"bsae\"\n",
            "no profile `bsae` to extend (profiles: base): fix the name or add [profiles.bsae]",
        ),
        (
            "[profiles.tuned]\nextends = \"tuned\"\n",
            "a profile cannot extend itself",
        ),
        (
            "[profiles.tuned]\nextends = \"mid\"\n[profiles.mid]\nextends = \"base\"\n",
            "`mid` itself extends `base`, and a profile extends one level only: extend `base` directly",
        ),
        (
            "[profiles.tuned]\nextends = \"none\"\n",
            "`none` is a built-in mode, not a profile",
        ),
        (
            "[profiles.tuned]\nextends = \"auto\"\n",
            "`auto` is a built-in mode, not a profile",
        ),
    ];
    for (child, needle) in cases {
        let e = err(&format!("{base}{child}"));
        assert_eq!(e.file, "/etc/slurm/gpudirect.toml");
        assert_eq!(e.line, Some(4), "{child}: {e}");
        assert_eq!(
            e.key.as_deref(),
            Some("profiles.tuned.extends"),
            "{child}: {e}"
        );
        assert!(e.message.contains(needle), "{child}: {e}");
    }
}

/// The file's order does not matter: the base may come after the profile that extends
/// it, whichever name sorts first.
#[test]
fn the_base_may_be_written_after_the_extending_profile() {
    for (child, base) in [("a-tuned", "zz"), ("zz-tuned", "a")] {
        let text = format!(
            "[profiles.{child}]\nextends = \"{base}\"\n[profiles.{child}.env]\nB = \"2\"\n\n[profiles.{base}]\ntransport = \"X\"\n[profiles.{base}.env]\nA = \"1\"\n"
        );
        let config = parse_config(&text, "t.toml").unwrap();
        let tuned = &config.profiles[child];
        assert_eq!(tuned.transport.as_deref(), Some("X"), "{text}");
        let env: Vec<(&str, usize)> = tuned
            .env
            .iter()
            .map(|v| (v.name.as_str(), v.line))
            .collect();
        assert_eq!(env, [("A", 9), ("B", 4)], "{text}");
        assert_eq!(tuned.lines.name, 1);
    }
}

/// A check that fails on the merged profile because of an inherited key points at the
/// base's line and says where the key comes from.
#[test]
fn an_error_in_an_inherited_key_points_at_the_base() {
    let text = format!("{SAMPLE}\n[profiles.tuned]\nextends = \"tcpx\"\ndata_nics = [\"eth3\"]\n");
    // Two mistakes: the inherited gpu_nics and nic_cpus both name eth1.
    let e = first_err(&text);
    assert_eq!(e.key.as_deref(), Some("profiles.tuned.gpu_nics"), "{e}");
    assert_eq!(e.line, Some(7), "tcpx's gpu_nics: {e}");
    assert!(
        e.message.contains("`eth1` is not one of data_nics (eth3) (inherited from profiles.tcpx: write the key in profiles.tuned to override it)"),
        "{e}"
    );
    // The profile's own key: no such note.
    let e = err(&format!(
        "{SAMPLE}\n[profiles.tuned]\nextends = \"tcpx\"\ngpu_nics = [\"eth9\"]\n"
    ));
    assert_eq!(e.line, Some(31));
    assert!(!e.message.contains("inherited"), "{e}");
    // An unknown key in an extending profile is still an error.
    let e = err(&format!(
        "{SAMPLE}\n[profiles.tuned]\nextends = \"tcpx\"\nextend = \"x\"\n"
    ));
    assert_eq!(e.line, Some(31));
    assert!(e.message.contains("extend"), "{e}");
}

/// What `gpudirect tune --write` makes without a base: a profile of a description and
/// variables only, accepted as it always was.
#[test]
fn a_standalone_tuned_profile_is_accepted() {
    let shipped = include_str!("../../../slurm-conf/gpudirect.toml");
    let overlay = "# Written by `gpudirect tune` (run t1).\n\n[profiles.tuned]\ndescription = \"NCCL_MIN_NCHANNELS=32 (gpudirect tune t1)\"\n\n[profiles.tuned.env]\nNCCL_MIN_NCHANNELS = \"32\"\n";
    let config = parse_config(&format!("{shipped}{overlay}"), "shipped").unwrap();
    let tuned = &config.profiles["tuned"];
    assert_eq!(tuned.extends, None);
    assert_eq!(tuned.transport, None);
    assert!(tuned.data_nics.is_empty());
    assert_eq!(tuned.env.len(), 1);
    assert_eq!(tuned.env[0].name, "NCCL_MIN_NCHANNELS");
    assert!(declares_profile(&format!("{shipped}{overlay}"), "tuned"));
}

/// The shipped config with the overlay `gpudirect tune --write` makes for `tcpx`
/// appended, as the admin installs it.
#[test]
fn the_shipped_config_with_a_tuned_overlay_parses() {
    let shipped = include_str!("../../../slurm-conf/gpudirect.toml");
    let overlay = "# Written by `gpudirect tune` (run t1234) at 2026-11-30T22:00:00Z.\n# Measured: all_reduce.\n\n[profiles.tcpx-tuned]\nextends = \"tcpx\"\ndescription = \"tcpx with NCCL_MIN_NCHANNELS=32 (gpudirect tune t1234, all_reduce ...)\"\n\n[profiles.tcpx-tuned.env]\nNCCL_MIN_NCHANNELS = \"32\"\n";
    let text = format!("{shipped}{overlay}");
    let config = parse_config(&text, "shipped").unwrap();
    let tcpx = &config.profiles["tcpx"];
    let tuned = &config.profiles["tcpx-tuned"];
    assert_eq!(tuned.extends.as_deref(), Some("tcpx"));
    assert!(tuned
        .description
        .starts_with("tcpx with NCCL_MIN_NCHANNELS=32"));
    assert_eq!(tuned.transport.as_deref(), Some("GPUDirectTCPX"));
    assert_eq!(tuned.control_nic, tcpx.control_nic);
    assert_eq!(tuned.data_nics, tcpx.data_nics);
    assert_eq!(tuned.gpu_nics, tcpx.gpu_nics);
    assert_eq!(tuned.nic_cpus, tcpx.nic_cpus);
    assert_eq!(tuned.checks, tcpx.checks);
    assert_eq!(tuned.env.len(), tcpx.env.len() + 1);
    for var in &tcpx.env {
        assert!(tuned.env.contains(var), "{}", var.name);
    }
    let new = tuned
        .env
        .iter()
        .find(|v| v.name == "NCCL_MIN_NCHANNELS")
        .unwrap();
    assert_eq!(new.value, Template::parse("32").unwrap());
    assert_eq!(new.line, shipped.lines().count() + 9);
    assert!(!new.forced);
    // srun's scan before submission finds it.
    assert!(declares_profile(&text, "tcpx-tuned"));
}

#[test]
fn empty_config_is_valid() {
    let config = parse_config("", "t.toml").unwrap();
    assert!(config.profiles.is_empty());
    assert!(config.default_mode.is_none());
}

/// Issue #40: `gdr` says whether a profile expects GPUDirect RDMA; left out it is `None`
/// (today's configs stay valid and judge nothing), and an extending profile inherits it.
#[test]
fn gdr_is_optional_and_inherited() {
    let config = parse_config(SAMPLE, "t.toml").unwrap();
    assert_eq!(config.profiles["tcpx"].gdr, None);
    let text =
        format!("{SAMPLE}\n[profiles.rdma]\ngdr = true\n[profiles.more]\nextends = \"rdma\"\n");
    let config = parse_config(&text, "t.toml").unwrap();
    assert_eq!(config.profiles["rdma"].gdr, Some(true));
    assert_eq!(config.profiles["more"].gdr, Some(true));
    let bad = format!("{SAMPLE}\n[profiles.rdma]\ngdr = \"yes\"\n");
    assert!(parse_config(&bad, "t.toml").is_err());
}
