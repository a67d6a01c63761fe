//! The standalone `tines-bench` binary (the same entry as `tines bench`).

fn main() {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    std::process::exit(loadgen::main("tines-bench", &argv));
}
