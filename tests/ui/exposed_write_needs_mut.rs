// Writing into an exposed region needs exclusive access, so two local writers cannot race.
use rdmaxfer::verbs::ExposedRegion;

fn misuse(r: &ExposedRegion) {
    r.write_at(0, b"x").unwrap();
}

fn main() {}
