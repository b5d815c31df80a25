//! `gpudirect`: the launcher CLI. Parses arguments and dispatches; the work lives in modules.
fn main() {}
