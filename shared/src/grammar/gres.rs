//! Generic resources: `--gres=name[[:type]:count][,…]` and the GPU forms `--gpus=[type:]n[,…]`.

use super::ValueError;
use serde::{Deserialize, Serialize};

/// One requested generic resource: `gpu:h100:2` is name `gpu`, type `h100`, count 2.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct GresRequest {
    /// Resource name (`gpu`, `shard`, …).
    pub name: String,
    /// Resource type (`h100`, `1g.10gb`), if one was asked for.
    pub gres_type: Option<String>,
    /// How many.
    pub count: u64,
}

impl std::fmt::Display for GresRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.gres_type {
            Some(t) => write!(f, "{}:{}:{}", self.name, t, self.count),
            None => write!(f, "{}:{}", self.name, self.count),
        }
    }
}

const GRES_EXPECTED: &str = "name[[:type]:count][,...]";
const GPUS_EXPECTED: &str = "[type:]count[,...]";

fn parse_count(text: &str) -> Option<u64> {
    let (digits, factor) = match text.chars().last()? {
        'k' | 'K' => (&text[..text.len() - 1], 1u64 << 10),
        'm' | 'M' => (&text[..text.len() - 1], 1 << 20),
        'g' | 'G' => (&text[..text.len() - 1], 1 << 30),
        't' | 'T' => (&text[..text.len() - 1], 1 << 40),
        'p' | 'P' => (&text[..text.len() - 1], 1 << 50),
        _ => (text, 1),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse::<u64>().ok()?.checked_mul(factor)
}

fn valid_word(s: &str) -> bool {
    !s.is_empty() && s.len() <= 64 && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

/// Parses a `--gres` list. `none` gives an empty list.
pub fn parse_gres(text: &str) -> Result<Vec<GresRequest>, ValueError> {
    let err = || ValueError::new("generic resource (gres) specification", text, GRES_EXPECTED);
    if text.trim().eq_ignore_ascii_case("none") {
        return Ok(Vec::new());
    }
    let mut requests = Vec::new();
    for item in text.split(',') {
        let item = item.strip_prefix("gres:").or_else(|| item.strip_prefix("gres/")).unwrap_or(item);
        let parts: Vec<&str> = item.split(':').collect();
        let request = match parts.as_slice() {
            [name] => GresRequest { name: (*name).to_owned(), gres_type: None, count: 1 },
            [name, last] => match parse_count(last) {
                Some(count) => GresRequest { name: (*name).to_owned(), gres_type: None, count },
                None => GresRequest { name: (*name).to_owned(), gres_type: Some((*last).to_owned()), count: 1 },
            },
            [name, gres_type, count] => GresRequest {
                name: (*name).to_owned(),
                gres_type: Some((*gres_type).to_owned()),
                count: parse_count(count).ok_or_else(err)?,
            },
            _ => return Err(err()),
        };
        if !valid_word(&request.name) || request.gres_type.as_deref().is_some_and(|t| !valid_word(t)) {
            return Err(err());
        }
        requests.push(request);
    }
    Ok(requests)
}

/// Parses a `--gpus`/`--gpus-per-node`/`--gpus-per-task` list into `gpu` requests.
pub fn parse_gpus(text: &str) -> Result<Vec<GresRequest>, ValueError> {
    let err = || ValueError::new("GPU specification", text, GPUS_EXPECTED);
    let mut requests = Vec::new();
    for item in text.split(',') {
        let request = match item.split(':').collect::<Vec<_>>().as_slice() {
            [count] => GresRequest { name: "gpu".into(), gres_type: None, count: parse_count(count).ok_or_else(err)? },
            [gres_type, count] if valid_word(gres_type) => GresRequest {
                name: "gpu".into(),
                gres_type: Some((*gres_type).to_owned()),
                count: parse_count(count).ok_or_else(err)?,
            },
            _ => return Err(err()),
        };
        requests.push(request);
    }
    Ok(requests)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn show(r: Result<Vec<GresRequest>, ValueError>) -> String {
        match r {
            Ok(v) => v.iter().map(ToString::to_string).collect::<Vec<_>>().join(","),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn gres() {
        assert_eq!(show(parse_gres("gpu")), "gpu:1");
        assert_eq!(show(parse_gres("gpu:2")), "gpu:2");
        assert_eq!(show(parse_gres("gpu:a100:2")), "gpu:a100:2");
        assert_eq!(show(parse_gres("gpu:h100")), "gpu:h100:1");
        assert_eq!(show(parse_gres("gpu:a100_1g.10gb:1,shard:1")), "gpu:a100_1g.10gb:1,shard:1");
        assert_eq!(show(parse_gres("gres:gpu:1")), "gpu:1");
        assert_eq!(show(parse_gres("none")), "");
        assert_eq!(
            show(parse_gres("gpu:a:b:c")),
            "invalid generic resource (gres) specification `gpu:a:b:c`: expected name[[:type]:count][,...]"
        );
        assert_eq!(show(parse_gpus("2")), "gpu:2");
        assert_eq!(show(parse_gpus("h100:4")), "gpu:h100:4");
        assert_eq!(show(parse_gpus("x")), "invalid GPU specification `x`: expected [type:]count[,...]");
    }
}
