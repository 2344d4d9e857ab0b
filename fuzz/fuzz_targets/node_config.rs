//! Fuzzes node configuration files (`NodeConfig::from_toml`: TOML into `NodeConfig`, then
//! `validate`), which operators write and `meridian node --config` reads.
//!
//! Properties: parsing either errors or yields a configuration that validates, whose TOML
//! (`to_toml`) parses back to the same configuration.
#![no_main]

use libfuzzer_sys::fuzz_target;
use meridian_server::NodeConfig;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(config) = NodeConfig::from_toml(text) else {
        return;
    };
    config
        .validate()
        .expect("from_toml returned a configuration that does not validate");
    let toml = config
        .to_toml()
        .expect("a valid configuration writes as TOML");
    let back = NodeConfig::from_toml(&toml).expect("written TOML reads back");
    assert_eq!(
        back, config,
        "TOML round trip changed the configuration:\n{toml}"
    );
});
