//! [`Checker`]: raw values into checked ones, each error pointing at its file, line and
//! key.

use super::raw::*;
use super::*;
use crate::text::has_control;

/// Turns raw values into checked ones, building errors that point into the text.
pub(super) struct Checker<'a> {
    pub(super) source: &'a str,
    /// [`newline_offsets`] of the text: every value's line is looked up in it (counting the
    /// newlines before each of some hundred values made parsing the shipped config take
    /// 0.9 ms instead of 0.15 ms).
    pub(super) newlines: Vec<usize>,
}

type Checked<T> = Result<T, ConfigError>;

impl Checker<'_> {
    /// The line where a value (or key) starts.
    fn line<T>(&self, value: &Spanned<T>) -> usize {
        self.line_at(value.span().start)
    }

    /// The line (from 1) that byte `offset` is on.
    pub(super) fn line_at(&self, offset: usize) -> usize {
        self.newlines.partition_point(|&nl| nl < offset) + 1
    }

    fn error(
        &self,
        span: Range<usize>,
        key: impl Into<String>,
        message: impl Into<String>,
    ) -> ConfigError {
        ConfigError {
            file: self.source.to_string(),
            line: Some(self.line_at(span.start)),
            key: Some(escape_controls(&key.into())),
            message: escape_controls(&message.into()),
        }
    }

    /// Every error of `raw`, in the order the checks run: the profiles by name, `[ras]`,
    /// `[watch]`, `[nic_counters]`, `[quarantine]`, `default_mode`, the node sets. A check
    /// that depends on a value found wrong is not run (no second error about the same
    /// mistake), and `broken` names profiles already reported (by the caller, or here):
    /// a reference to one is not an error of its own.
    pub(super) fn check(
        &self,
        raw: RawConfig,
        broken: &BTreeSet<String>,
    ) -> Result<Config, Vec<ConfigError>> {
        let mut errors = Vec::new();
        let mut broken = broken.clone();
        let mut profiles = BTreeMap::new();
        for (name, raw_profile) in &raw.profiles {
            match self.check_named_profile(&raw.profiles, name, raw_profile) {
                Ok(profile) => {
                    profiles.insert(name.get_ref().clone(), profile);
                }
                Err(found) => {
                    broken.insert(name.get_ref().clone());
                    errors.extend(found);
                }
            }
        }
        let mut config = Config {
            source: self.source.to_string(),
            default_mode: None,
            ras: match &raw.ras {
                Some(ras) => kept(&mut errors, self.check_ras(ras), RasSettings::default()),
                None => RasSettings::default(),
            },
            watch: match &raw.watch {
                Some(watch) => kept(&mut errors, self.check_watch(watch).map(Some), None),
                None => None,
            },
            nic_counters: match &raw.nic_counters {
                Some(counters) => kept(
                    &mut errors,
                    self.check_nic_counters(counters).map(Some),
                    None,
                ),
                None => None,
            },
            quarantine: match &raw.quarantine {
                Some(q) => kept(
                    &mut errors,
                    self.check_quarantine(q),
                    QuarantineSettings::default(),
                ),
                None => QuarantineSettings::default(),
            },
            profiles,
            node_sets: Vec::new(),
        };
        if let Some(mode) = raw
            .default_mode
            .as_ref()
            .filter(|m| !broken.contains(m.get_ref()))
        {
            config.default_mode = kept(
                &mut errors,
                self.check_mode(&config, mode, "default_mode").map(Some),
                None,
            );
        }
        for (index, raw_set) in raw.node_set.into_iter().enumerate() {
            match self.check_node_set(&config, index, raw_set, &broken) {
                Ok(set) => config.node_sets.push(set),
                Err(found) => errors.extend(found),
            }
        }
        if errors.is_empty() {
            Ok(config)
        } else {
            Err(errors)
        }
    }

    /// One profile: its name, its base when it `extends` one, then its keys (merged with
    /// the base's, an error about an inherited key saying so).
    fn check_named_profile(
        &self,
        profiles: &BTreeMap<Spanned<String>, RawProfile>,
        name: &Spanned<String>,
        raw_profile: &RawProfile,
    ) -> Result<Profile, Vec<ConfigError>> {
        let key = format!("profiles.{}", name.get_ref());
        if !is_profile_name(name.get_ref()) {
            return Err(vec![self.error(
                name.span(),
                key,
                "a profile name is lowercase letters, digits, `-` and `_`, at most 32 characters",
            )]);
        }
        if RESERVED_MODES.contains(&name.get_ref().as_str()) {
            return Err(vec![self.error(
                name.span(),
                key,
                "`none` and `auto` are built-in modes; give this profile another name",
            )]);
        }
        match &raw_profile.extends {
            None => self.check_profile(name.get_ref(), name.span(), &key, raw_profile),
            Some(base_name) => {
                let base = self
                    .base_of(profiles, name.get_ref(), &key, base_name)
                    .map_err(|e| vec![e])?;
                let (merged, inherited) = inherit(raw_profile, base);
                self.check_profile(name.get_ref(), name.span(), &key, &merged)
                    .map_err(|found| {
                        found
                            .into_iter()
                            .map(|e| say_inherited(e, &key, &inherited, base_name.get_ref()))
                            .collect()
                    })
            }
        }
    }

    /// `[ras]`: ports within 1024-65535, the span at least 1 and ending by 65535.
    fn check_ras(&self, raw: &Spanned<RawRas>) -> Checked<RasSettings> {
        let defaults = RasSettings::default();
        let r = raw.get_ref();
        let port = |v: &Option<Spanned<i64>>, key: &str, default: u16, lo: i64| -> Checked<u16> {
            let Some(v) = v else { return Ok(default) };
            match u16::try_from(*v.get_ref()) {
                Ok(p) if i64::from(p) >= lo => Ok(p),
                _ => Err(self.error(
                    v.span(),
                    format!("ras.{key}"),
                    format!(
                        "{} is no {}: write a number from {lo} to 65535",
                        v.get_ref(),
                        if key == "port_base" {
                            "port for a job's RAS"
                        } else {
                            "count of ports"
                        }
                    ),
                )),
            }
        };
        let base = port(&r.port_base, "port_base", defaults.port_base, 1024)?;
        let span = port(&r.port_span, "port_span", defaults.port_span, 1)?;
        if u32::from(base) + u32::from(span) - 1 > 65535 {
            let at = r.port_span.as_ref().map_or(raw.span(), Spanned::span);
            return Err(self.error(
                at,
                "ras.port_span",
                format!(
                    "ports {base} to {} end past 65535: lower port_base or port_span",
                    u32::from(base) + u32::from(span) - 1
                ),
            ));
        }
        Ok(RasSettings {
            enabled: r.enabled.unwrap_or(defaults.enabled),
            port_base: base,
            port_span: span,
        })
    }

    /// `[watch]`: absolute paths, an interval from 100 ms to one hour.
    fn check_watch(&self, raw: &Spanned<RawWatch>) -> Checked<WatchSettings> {
        let w = raw.get_ref();
        let inspector = self.check_absolute_path(&w.inspector, "watch.inspector")?;
        let connections = match &w.connections {
            Some(lib) => Some(self.check_absolute_path(lib, "watch.connections")?),
            None => None,
        };
        let dump_root = match &w.dump_root {
            Some(root) => self.check_absolute_path(root, "watch.dump_root")?,
            None => "/tmp".to_string(),
        };
        let interval_ms = match &w.interval_ms {
            None => 1000,
            Some(v) => match u32::try_from(*v.get_ref()) {
                Ok(ms) if (100..=3_600_000).contains(&ms) => ms,
                _ => {
                    return Err(self.error(
                        v.span(),
                        "watch.interval_ms",
                        format!(
                            "{} is no dump interval: write milliseconds from 100 to 3600000",
                            v.get_ref()
                        ),
                    ))
                }
            },
        };
        Ok(WatchSettings {
            inspector,
            connections,
            dump_root,
            interval_ms,
            verbose: w.verbose.unwrap_or(true),
            always: w.always.unwrap_or(false),
            replace_profiler: w.replace_profiler.unwrap_or(false),
        })
    }

    /// `[quarantine]`: a reservation name Slurm takes, user names, counts from 1 to 100.
    fn check_quarantine(&self, raw: &Spanned<RawQuarantine>) -> Checked<QuarantineSettings> {
        let q = raw.get_ref();
        let mut settings = QuarantineSettings::default();
        let name_ok = |s: &str| {
            !s.is_empty()
                && s.len() <= 64
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        };
        if let Some(name) = &q.reservation {
            if !name_ok(name.get_ref()) {
                return Err(self.error(
                    name.span(),
                    "quarantine.reservation",
                    "write a reservation name of letters, digits, `-`, `_` and `.` (at most 64)",
                ));
            }
            settings.reservation = name.get_ref().clone();
        }
        if let Some(users) = &q.users {
            if users.get_ref().is_empty() {
                return Err(self.error(
                    users.span(),
                    "quarantine.users",
                    "name at least one user who may run jobs in the reservation (the admin who runs `gpudirect sweep`, e.g. \"root\")",
                ));
            }
            for user in users.get_ref() {
                let u = user.get_ref();
                let ok = name_ok(u) && !u.starts_with('-');
                if !ok {
                    return Err(self.error(
                        user.span(),
                        "quarantine.users",
                        format!(
                            "{u:?} is no user name Slurm takes: letters, digits, `-`, `_`, `.`"
                        ),
                    ));
                }
            }
            settings.users = users
                .get_ref()
                .iter()
                .map(|u| u.get_ref().clone())
                .collect();
        }
        settings.instead_of_drain = q.instead_of_drain.unwrap_or(false);
        let count = |v: &Option<Spanned<i64>>, key: &str, default: u32| -> Checked<u32> {
            let Some(v) = v else { return Ok(default) };
            match u32::try_from(*v.get_ref()) {
                Ok(n) if (1..=100).contains(&n) => Ok(n),
                _ => Err(self.error(
                    v.span(),
                    format!("quarantine.{key}"),
                    format!(
                        "{} is no count of sweeps: write a number from 1 to 100",
                        v.get_ref()
                    ),
                )),
            }
        };
        settings.passes_to_return = count(&q.passes_to_return, "passes_to_return", 2)?;
        settings.failures_to_drain = count(&q.failures_to_drain, "failures_to_drain", 3)?;
        Ok(settings)
    }

    /// `[nic_counters]`: an absolute state folder, and per class a whole number of counts a
    /// minute (a class not written keeps its default).
    fn check_nic_counters(&self, raw: &Spanned<RawNicCounters>) -> Checked<NicCounterSettings> {
        let r = raw.get_ref();
        let mut settings = NicCounterSettings::default();
        if let Some(dir) = &r.state_dir {
            settings.state_dir = self.check_absolute_path(dir, "nic_counters.state_dir")?;
        }
        for (class, limit) in &r.per_minute {
            let key = format!("nic_counters.per_minute.{}", class.get_ref());
            let Some(found) = CounterClass::ALL
                .into_iter()
                .find(|c| c.name() == class.get_ref())
            else {
                let names: Vec<&str> = CounterClass::ALL.iter().map(|c| c.name()).collect();
                return Err(self.error(
                    class.span(),
                    key,
                    format!("unknown class of counters (classes: {})", names.join(", ")),
                ));
            };
            let Ok(per_minute) = u64::try_from(*limit.get_ref()) else {
                return Err(self.error(
                    limit.span(),
                    key,
                    format!(
                        "{} is no rise per minute: write 0 (any rise is a finding) or more",
                        limit.get_ref()
                    ),
                ));
            };
            settings.per_minute.insert(found, per_minute);
        }
        Ok(settings)
    }

    /// The profile that `extends` names, which must exist, be another, and extend none
    /// itself (one level keeps what a profile is readable from two places in the file).
    fn base_of<'r>(
        &self,
        profiles: &'r BTreeMap<Spanned<String>, RawProfile>,
        name: &str,
        key: &str,
        base: &Spanned<String>,
    ) -> Checked<&'r RawProfile> {
        let key = format!("{key}.extends");
        let shown = sanitize_for_message(base.get_ref());
        let others = || {
            let names: Vec<&str> = profiles
                .keys()
                .map(|n| n.get_ref().as_str())
                .filter(|n| *n != name)
                .collect();
            if names.is_empty() {
                "none".to_string()
            } else {
                names.join(", ")
            }
        };
        if RESERVED_MODES.contains(&base.get_ref().as_str()) {
            return Err(self.error(
                base.span(),
                key,
                format!(
                    "`{shown}` is a built-in mode, not a profile: extend a profile (profiles: {})",
                    others()
                ),
            ));
        }
        if base.get_ref() == name {
            return Err(self.error(
                base.span(),
                key,
                format!(
                    "a profile cannot extend itself: remove `extends` or name another profile (profiles: {})",
                    others()
                ),
            ));
        }
        let Some(found) = profiles.get(base.get_ref().as_str()) else {
            return Err(self.error(
                base.span(),
                key,
                format!(
                    "no profile `{shown}` to extend (profiles: {}): fix the name or add [profiles.{shown}]",
                    others()
                ),
            ));
        };
        if let Some(grand) = &found.extends {
            let grand = sanitize_for_message(grand.get_ref());
            return Err(self.error(
                base.span(),
                key,
                format!(
                    "`{shown}` itself extends `{grand}`, and a profile extends one level only: extend `{grand}` directly (extends = \"{grand}\") and copy what `{shown}` adds"
                ),
            ));
        }
        Ok(found)
    }

    fn check_mode(&self, config: &Config, mode: &Spanned<String>, key: &str) -> Checked<Mode> {
        config
            .parse_mode(mode.get_ref())
            .map_err(|e| self.error(mode.span(), key, e.to_string()))
    }

    fn check_nic(&self, nic: &Spanned<String>, key: &str) -> Checked<String> {
        if is_nic_name(nic.get_ref()) {
            Ok(nic.get_ref().clone())
        } else {
            Err(self.error(
                nic.span(),
                key,
                format!(
                    "`{}` is not an interface name (letters, digits, `-_.`, at most 15)",
                    sanitize_for_message(nic.get_ref())
                ),
            ))
        }
    }

    fn check_absolute_path(&self, path: &Spanned<String>, key: &str) -> Checked<String> {
        let p = path.get_ref();
        let clean = p.starts_with('/')
            && !p.split('/').any(|c| c == "..")
            && !p.contains(['{', '}'])
            && !has_control(p);
        if clean {
            Ok(p.clone())
        } else {
            Err(self.error(
                path.span(),
                key,
                "must be an absolute path without `..`, placeholders or control characters",
            ))
        }
    }

    /// A profile's keys, every error found. A key checked against another (`gpu_nics`
    /// against `data_nics`, `pin_cpus` against both) is not checked when that one is wrong.
    fn check_profile(
        &self,
        name: &str,
        name_span: Range<usize>,
        key: &str,
        raw: &RawProfile,
    ) -> Result<Profile, Vec<ConfigError>> {
        let mut errors = Vec::new();
        let control_nic = kept(
            &mut errors,
            raw.control_nic
                .as_ref()
                .map(|n| self.check_nic(n, &format!("{key}.control_nic")))
                .transpose(),
            None,
        );
        let data_nics = kept(&mut errors, self.check_data_nics(key, raw), Vec::new());
        // Every check below that reads the NICs waits for them to be right.
        let nics_right = errors.is_empty();
        let declared: BTreeSet<&str> = control_nic
            .iter()
            .chain(data_nics.iter())
            .map(String::as_str)
            .collect();
        let before = errors.len();
        let (gpu_nics, nic_cpus) = if nics_right {
            (
                kept(
                    &mut errors,
                    self.check_gpu_nics(key, raw, &data_nics),
                    Vec::new(),
                ),
                kept(
                    &mut errors,
                    self.check_nic_cpus(key, raw, &data_nics),
                    BTreeMap::new(),
                ),
            )
        } else {
            (Vec::new(), BTreeMap::new())
        };
        let data_nic_class = kept(
            &mut errors,
            self.check_data_nic_class(key, raw),
            NicClass::Net,
        );
        let nic_locality = kept(
            &mut errors,
            self.check_nic_locality(key, raw),
            NicLocality::Config,
        );
        // Pinning is judged on the NICs' lists and the locality source, all right.
        let pinning_judged = nics_right && errors.len() == before;
        let pin_cpus = match &raw.pin_cpus {
            Some(pin)
                if pinning_judged
                    && *pin.get_ref()
                    && nic_locality == NicLocality::Config
                    && (nic_cpus.is_empty() || gpu_nics.is_empty()) =>
            {
                errors.push(self.error(
                    pin.span(),
                    format!("{key}.pin_cpus"),
                    "pinning needs gpu_nics and nic_cpus (a task's CPUs are its NIC's CPUs), or nic_locality = \"sysfs\"",
                ));
                false
            }
            Some(pin) => *pin.get_ref(),
            None => false,
        };
        let line_rate_gbit = match &raw.line_rate_gbit {
            Some(rate) if nics_right => kept(
                &mut errors,
                self.check_line_rate(rate, &format!("{key}.line_rate_gbit"), &data_nics),
                BTreeMap::new(),
            ),
            _ => BTreeMap::new(),
        };
        let paths_before = errors.len();
        let mut library_dirs = Vec::new();
        for dir in items(&raw.library_dirs) {
            if let Some(dir) = kept(
                &mut errors,
                self.check_absolute_path(dir, &format!("{key}.library_dirs"))
                    .map(Some),
                None,
            ) {
                library_dirs.push(dir);
            }
        }
        let topology_file = kept(
            &mut errors,
            raw.topology_file
                .as_ref()
                .map(|f| self.check_absolute_path(f, &format!("{key}.topology_file")))
                .transpose(),
            None,
        );
        let paths_right = errors.len() == paths_before;
        let env = if nics_right {
            let (env, found) = self.check_env(key, raw, &declared, raw.topology_file.is_some());
            errors.extend(found);
            env
        } else {
            Vec::new()
        };

        let no_checks = RawChecks::default();
        let raw_checks = raw.checks.as_ref().unwrap_or(&no_checks);
        let checks = if nics_right && paths_right {
            kept(
                &mut errors,
                self.check_checks(key, raw_checks, &declared, &library_dirs, &topology_file),
                Checks::default(),
            )
        } else {
            Checks::default()
        };
        if nics_right && raw_checks.nics && declared.is_empty() {
            errors.push(self.error(
                name_span.clone(),
                format!("{key}.checks.nics"),
                "the profile declares no NICs to check (set control_nic/data_nics)",
            ));
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        let lines = ProfileLines {
            name: self.line_at(name_span.start),
            data_nics: raw.data_nics.as_ref().map(|v| self.line(v)),
            library_dirs: raw.library_dirs.as_ref().map(|v| self.line(v)),
            topology_file: raw.topology_file.as_ref().map(|v| self.line(v)),
            check_libraries: raw_checks.libraries.as_ref().map(|v| self.line(v)),
        };
        Ok(Profile {
            name: name.to_string(),
            extends: raw.extends.as_ref().map(|b| b.get_ref().clone()),
            description: raw.description.clone().unwrap_or_default(),
            strict: raw.strict.unwrap_or(false),
            transport: raw.transport.as_ref().map(|t| t.get_ref().clone()),
            control_nic,
            data_nics,
            data_nic_class,
            nic_locality,
            gpu_nics,
            nic_cpus,
            pin_cpus,
            gdr: raw.gdr.as_ref().map(|g| *g.get_ref()),
            line_rate_gbit,
            library_dirs,
            topology_file,
            env,
            checks,
            lines,
        })
    }

    /// `data_nics`: valid NIC names, each once.
    fn check_data_nics(&self, key: &str, raw: &RawProfile) -> Checked<Vec<String>> {
        let mut data_nics = Vec::new();
        for nic in items(&raw.data_nics) {
            let nic_name = self.check_nic(nic, &format!("{key}.data_nics"))?;
            if data_nics.contains(&nic_name) {
                return Err(self.error(nic.span(), format!("{key}.data_nics"), "listed twice"));
            }
            data_nics.push(nic_name);
        }
        Ok(data_nics)
    }

    /// `gpu_nics`: each one of `data_nics`.
    fn check_gpu_nics(
        &self,
        key: &str,
        raw: &RawProfile,
        data_nics: &[String],
    ) -> Checked<Vec<String>> {
        let mut gpu_nics = Vec::new();
        for nic in raw.gpu_nics.iter().flatten() {
            if !data_nics.contains(nic.get_ref()) {
                return Err(self.error(
                    nic.span(),
                    format!("{key}.gpu_nics"),
                    format!(
                        "`{}` is not one of data_nics ({})",
                        sanitize_for_message(nic.get_ref()),
                        data_nics.join(", ")
                    ),
                ));
            }
            gpu_nics.push(nic.get_ref().clone());
        }
        Ok(gpu_nics)
    }

    /// `nic_cpus`: a CPU list for each of some `data_nics`.
    fn check_nic_cpus(
        &self,
        key: &str,
        raw: &RawProfile,
        data_nics: &[String],
    ) -> Checked<BTreeMap<String, CpuList>> {
        let mut nic_cpus = BTreeMap::new();
        for (nic, cpus) in raw.nic_cpus.iter().flatten() {
            let nic_key = format!("{key}.nic_cpus.{}", nic.get_ref());
            if !data_nics.contains(nic.get_ref()) {
                return Err(self.error(
                    nic.span(),
                    nic_key,
                    "CPU lists are given for data NICs only; add it to data_nics or remove it",
                ));
            }
            let list = CpuList::parse(cpus.get_ref())
                .map_err(|e| self.error(cpus.span(), nic_key, e.to_string()))?;
            nic_cpus.insert(nic.get_ref().clone(), list);
        }
        Ok(nic_cpus)
    }

    /// `data_nic_class`: `net` (the default) or `infiniband`.
    fn check_data_nic_class(&self, key: &str, raw: &RawProfile) -> Checked<NicClass> {
        Ok(match &raw.data_nic_class {
            None => NicClass::Net,
            Some(c) => match c.get_ref().as_str() {
                "net" => NicClass::Net,
                "infiniband" => NicClass::Infiniband,
                other => {
                    return Err(self.error(
                        c.span(),
                        format!("{key}.data_nic_class"),
                        format!(
                            "`{}` is not a NIC class: use \"net\" (interfaces, /sys/class/net) or \"infiniband\" (RDMA devices, /sys/class/infiniband)",
                            sanitize_for_message(other)
                        ),
                    ))
                }
            },
        })
    }

    /// `nic_locality`: `config` (the default) or `sysfs`.
    fn check_nic_locality(&self, key: &str, raw: &RawProfile) -> Checked<NicLocality> {
        Ok(match &raw.nic_locality {
            None => NicLocality::Config,
            Some(l) => match l.get_ref().as_str() {
                "config" => NicLocality::Config,
                "sysfs" => NicLocality::Sysfs,
                other => {
                    return Err(self.error(
                        l.span(),
                        format!("{key}.nic_locality"),
                        format!(
                            "`{}` is not a locality source: use \"config\" (gpu_nics, nic_cpus) or \"sysfs\" (the node's PCIe layout)",
                            sanitize_for_message(other)
                        ),
                    ))
                }
            },
        })
    }

    /// `forced` (each a variable of `[env]`) and `[env]`: names a task may be given and
    /// templates over the `declared` NICs; a variable that loads code takes no per-task
    /// placeholder. The variables that are right, and an error for each one that is not.
    fn check_env(
        &self,
        key: &str,
        raw: &RawProfile,
        declared: &BTreeSet<&str>,
        has_topology_file: bool,
    ) -> (Vec<EnvVar>, Vec<ConfigError>) {
        let mut errors = Vec::new();
        let forced: BTreeSet<&str> = raw.forced.iter().map(|f| f.get_ref().as_str()).collect();
        for f in &raw.forced {
            if !raw.env.keys().any(|k| k.get_ref() == f.get_ref()) {
                errors.push(self.error(
                    f.span(),
                    format!("{key}.forced"),
                    format!(
                        "`{}` is not a variable of this profile's [env]",
                        sanitize_for_message(f.get_ref())
                    ),
                ));
            }
        }
        let mut env = Vec::new();
        for (var, value) in &raw.env {
            match self.check_env_var(key, var, value, declared, has_topology_file) {
                Ok(template) => env.push(EnvVar {
                    name: var.get_ref().clone(),
                    value: template,
                    forced: forced.contains(var.get_ref().as_str()),
                    line: self.line(var),
                }),
                Err(e) => errors.push(e),
            }
        }
        (env, errors)
    }

    /// One variable of `[env]`: its name, and its value as a template.
    fn check_env_var(
        &self,
        key: &str,
        var: &Spanned<String>,
        value: &Spanned<String>,
        declared: &BTreeSet<&str>,
        has_topology_file: bool,
    ) -> Checked<Template> {
        let var_key = format!("{key}.env.{}", var.get_ref());
        if let Some(problem) = env_name_problem(var.get_ref(), has_topology_file) {
            return Err(self.error(var.span(), var_key, problem));
        }
        let template = self.check_template(value, &var_key, declared)?;
        // What a task loads code from must be a path the plugin can check: a task
        // placeholder (`{gpu}` is the user's CUDA_VISIBLE_DEVICES) makes it another
        // path per task, one no check saw (security review S5).
        if super::loads_code(var.get_ref()) {
            if let Some(p) = template.placeholders().find(|p| p.per_task()) {
                return Err(self.error(
                    value.span(),
                    var_key,
                    format!(
                        "{} loads code, and {p} makes it another path in every task, unchecked: write the path out (per node: {{node}}, {{job_id}})",
                        var.get_ref()
                    ),
                ));
            }
        }
        Ok(template)
    }

    /// `line_rate_gbit`: one number for every data NIC (`200`), or a table with each data
    /// NIC's (`{ eth1 = 200, eth2 = 100 }`); whole Gbit/s, as NICs are sold. Every data NIC
    /// gets a rate, above zero.
    fn check_line_rate(
        &self,
        rate: &Spanned<toml::Value>,
        key: &str,
        data_nics: &[String],
    ) -> Checked<BTreeMap<String, u32>> {
        let positive = |v: &toml::Value, what: &str| -> Checked<u32> {
            v.as_integer()
                .and_then(|n| u32::try_from(n).ok())
                .filter(|n| *n > 0)
                .ok_or_else(|| {
                    self.error(
                        rate.span(),
                        key,
                        format!("{what} must be a whole number of Gbit/s above 0, e.g. 200"),
                    )
                })
        };
        if data_nics.is_empty() {
            return Err(self.error(
                rate.span(),
                key,
                "the profile declares no data_nics to give a line rate to",
            ));
        }
        match rate.get_ref() {
            toml::Value::Table(per_nic) => {
                let mut rates = BTreeMap::new();
                for (nic, value) in per_nic {
                    if !data_nics.contains(nic) {
                        return Err(self.error(
                            rate.span(),
                            key,
                            format!(
                                "`{}` is not one of data_nics ({})",
                                sanitize_for_message(nic),
                                data_nics.join(", ")
                            ),
                        ));
                    }
                    rates.insert(nic.clone(), positive(value, &format!("the rate of {nic}"))?);
                }
                if let Some(missing) = data_nics.iter().find(|n| !rates.contains_key(*n)) {
                    return Err(self.error(
                        rate.span(),
                        key,
                        format!("no rate for {missing}: give every data NIC its rate, or one number for all"),
                    ));
                }
                Ok(rates)
            }
            value => {
                let each = positive(value, "the line rate")?;
                Ok(data_nics.iter().map(|n| (n.clone(), each)).collect())
            }
        }
    }

    fn check_template(
        &self,
        value: &Spanned<String>,
        key: &str,
        declared_nics: &BTreeSet<&str>,
    ) -> Checked<Template> {
        let template = Template::parse(value.get_ref())
            .map_err(|e| self.error(value.span(), key, e.to_string()))?;
        for placeholder in template.placeholders() {
            if let Placeholder::NicNamed(nic) = placeholder {
                if !declared_nics.contains(nic.as_str()) {
                    return Err(self.error(
                        value.span(),
                        key,
                        format!("`{{nic:{nic}}}` names a NIC the profile does not declare"),
                    ));
                }
            }
        }
        Ok(template)
    }

    fn check_checks(
        &self,
        key: &str,
        raw: &RawChecks,
        declared: &BTreeSet<&str>,
        library_dirs: &[String],
        topology_file: &Option<String>,
    ) -> Checked<Checks> {
        let mut libraries = Vec::new();
        for lib in items(&raw.libraries) {
            let l = lib.get_ref();
            if l.is_empty() || l.contains('/') || l == "." || l == ".." || has_control(l) {
                return Err(self.error(
                    lib.span(),
                    format!("{key}.checks.libraries"),
                    "a library is a file name (no `/`, no control characters), looked up in library_dirs",
                ));
            }
            if library_dirs.is_empty() {
                return Err(self.error(
                    lib.span(),
                    format!("{key}.checks.libraries"),
                    "libraries are looked up in library_dirs, which is empty",
                ));
            }
            libraries.push(l.clone());
        }
        let topology = match &raw.topology_file {
            Some(t) if *t.get_ref() && topology_file.is_none() => {
                return Err(self.error(
                    t.span(),
                    format!("{key}.checks.topology_file"),
                    "the profile has no topology_file to check",
                ))
            }
            Some(t) => *t.get_ref(),
            None => false,
        };
        let rxdm_socket_dir = match &raw.rxdm_socket_dir {
            Some(dir) => {
                let dir_key = format!("{key}.checks.rxdm_socket_dir");
                if !dir.get_ref().starts_with('/')
                    || dir.get_ref().split('/').any(|c| c == "..")
                    || has_control(dir.get_ref())
                {
                    return Err(self.error(
                        dir.span(),
                        dir_key,
                        "must be an absolute path without `..` or control characters",
                    ));
                }
                let template = self.check_template(dir, &dir_key, declared)?;
                // One directory per job on a node (the prolog makes it): a placeholder
                // that differs per task or step, or that the user sets (`{gpu}` is the
                // task's CUDA_VISIBLE_DEVICES), would name another (security review S12).
                let per_task = template.placeholders().find_map(|p| match p {
                    Placeholder::StepId => Some("{step_id}"),
                    Placeholder::Rank => Some("{rank}"),
                    Placeholder::LocalRank => Some("{local_rank}"),
                    Placeholder::LocalSize => Some("{local_size}"),
                    Placeholder::Gpu => Some("{gpu}"),
                    Placeholder::Nic => Some("{nic}"),
                    Placeholder::Cpus => Some("{cpus}"),
                    _ => None,
                });
                if let Some(p) = per_task {
                    return Err(self.error(
                        dir.span(),
                        dir_key,
                        format!(
                            "{p} differs per task or step (or is the user's): the RxDM directory is one per job and node; use {{job_id}}, {{node}} or {{nic:NAME}}"
                        ),
                    ));
                }
                Some(template)
            }
            None => None,
        };
        Ok(Checks {
            nics: raw.nics,
            libraries,
            topology_file: topology,
            rxdm_socket_dir,
        })
    }

    /// One `[[node_set]]`, every error found. A `profile` or `default_mode` naming a
    /// profile in `broken` (already reported) is taken as written.
    fn check_node_set(
        &self,
        config: &Config,
        index: usize,
        raw: Spanned<RawNodeSet>,
        broken: &BTreeSet<String>,
    ) -> Result<NodeSet, Vec<ConfigError>> {
        let mut errors = Vec::new();
        let span = raw.span();
        let raw = raw.into_inner();
        let key = format!("node_set[{index}] ({})", sanitize_for_message(&raw.name));
        // The name is shown in users' error messages and logs, which are one line each.
        if raw.name.trim().is_empty() || has_control(&raw.name) {
            errors.push(self.error(
                span.clone(),
                format!("{key}.name"),
                "a node set name is shown in messages: write it on one line, without control characters",
            ));
        }
        let hosts = kept(
            &mut errors,
            HostlistPattern::new(raw.hosts.get_ref())
                .map(Some)
                .map_err(|e| self.error(raw.hosts.span(), format!("{key}.hosts"), e.to_string())),
            None,
        );
        let profile = match &raw.profile {
            Some(p)
                if !config.profiles.contains_key(p.get_ref()) && !broken.contains(p.get_ref()) =>
            {
                errors.push(self.error(
                    p.span(),
                    format!("{key}.profile"),
                    format!(
                        "no profile `{}` (profiles: {})",
                        sanitize_for_message(p.get_ref()),
                        config.profile_names().join(", ")
                    ),
                ));
                None
            }
            Some(p) => Some(p.get_ref().clone()),
            None => None,
        };
        let default_mode = match &raw.default_mode {
            Some(m) if broken.contains(m.get_ref()) => Some(Mode::Profile(m.get_ref().clone())),
            Some(m) => kept(
                &mut errors,
                self.check_mode(config, m, &format!("{key}.default_mode"))
                    .map(Some),
                None,
            ),
            None => None,
        };
        if default_mode == Some(Mode::Auto) && raw.profile.is_none() {
            errors.push(self.error(
                span.clone(),
                format!("{key}.default_mode"),
                "`auto` needs this node set's `profile`",
            ));
        }
        let mut skip_checks = Vec::new();
        for check in &raw.skip_checks {
            match CheckKind::from_name(check.get_ref()) {
                Some(kind) => skip_checks.push(kind),
                None => {
                    let names: Vec<&str> = CheckKind::ALL.iter().map(|k| k.name()).collect();
                    errors.push(self.error(
                        check.span(),
                        format!("{key}.skip_checks"),
                        format!(
                            "unknown check `{}` (checks: {})",
                            sanitize_for_message(check.get_ref()),
                            names.join(", ")
                        ),
                    ));
                }
            }
        }
        let mut nic_names = BTreeMap::new();
        for (logical, real) in &raw.nic_names {
            let nic_key = format!("{key}.nic_names");
            let logical = kept(
                &mut errors,
                self.check_nic(logical, &nic_key).map(Some),
                None,
            );
            let real = kept(&mut errors, self.check_nic(real, &nic_key).map(Some), None);
            if let (Some(logical), Some(real)) = (logical, real) {
                nic_names.insert(logical, real);
            }
        }
        match hosts {
            Some(hosts) if errors.is_empty() => Ok(NodeSet {
                name: raw.name,
                hosts_expr: raw.hosts.into_inner(),
                hosts,
                profile,
                default_mode,
                skip_checks,
                nic_names,
                line: self.line_at(span.start),
            }),
            _ => Err(errors),
        }
    }
}

/// `result`'s value; or, when it is an error, `fallback`, the error added to `errors`.
fn kept<T>(errors: &mut Vec<ConfigError>, result: Checked<T>, fallback: T) -> T {
    result.unwrap_or_else(|e| {
        errors.push(e);
        fallback
    })
}

/// Adds to an error about a key that a profile inherited where the key comes from: its
/// line is the base's, and the fix may be to override it in the extending profile.
fn say_inherited(
    mut error: ConfigError,
    key: &str,
    inherited: &[String],
    base: &str,
) -> ConfigError {
    let Some(rest) = error
        .key
        .as_deref()
        .and_then(|k| k.strip_prefix(key))
        .and_then(|k| k.strip_prefix('.'))
    else {
        return error;
    };
    let from_base = inherited.iter().any(|i| {
        rest == i
            || rest
                .strip_prefix(i.as_str())
                .is_some_and(|r| r.starts_with('.'))
    });
    if from_base {
        error.message.push_str(&format!(
            " (inherited from profiles.{}: write the key in {key} to override it)",
            escape_controls(base)
        ));
    }
    error
}

fn is_profile_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 32
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

/// Why a variable name may not appear in a profile's `[env]`, if it may not.
fn env_name_problem(name: &str, has_topology_file: bool) -> Option<String> {
    let valid = !name.is_empty()
        && !name.as_bytes()[0].is_ascii_digit()
        && name
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
    if !valid {
        return Some("a variable name is uppercase letters, digits and `_`".into());
    }
    if name == "LD_LIBRARY_PATH" {
        return Some("use library_dirs: the plugin prepends them to LD_LIBRARY_PATH".into());
    }
    // The dynamic loader takes LD_PRELOAD, LD_AUDIT and the rest in forms no path check
    // sees through (`/x.so:`, ` /x.so`, several names): every task would load them.
    if name.starts_with("LD_") {
        return Some(
            "the plugin sets no LD_* variable but LD_LIBRARY_PATH (from library_dirs, whose \
             folders it checks): a library the tasks must load goes in a folder of library_dirs"
                .into(),
        );
    }
    if name.starts_with("GPUDIRECT_") {
        return Some("GPUDIRECT_* variables are set by the plugin itself".into());
    }
    if name == "NCCL_TOPO_FILE" && has_topology_file {
        return Some("set either topology_file or NCCL_TOPO_FILE in [env], not both".into());
    }
    None
}

/// The byte offset of every `\n` in `text`, in order: what [`Checker`] finds lines with.
pub(super) fn newline_offsets(text: &str) -> Vec<usize> {
    text.bytes()
        .enumerate()
        .filter_map(|(i, b)| (b == b'\n').then_some(i))
        .collect()
}

/// The items of a list key, or none where the key is left out. (A list is kept whole in
/// a [`Spanned`] for its line.)
fn items<T>(list: &Option<Spanned<Vec<T>>>) -> &[T] {
    list.as_ref().map_or(&[], |l| l.get_ref().as_slice())
}
