//! `hsa-emu-install [DIR]`: puts the emulator into DIR (default `target/hsa-emu`) as
//! `libhsa-runtime64.so.1`, ready for `LD_LIBRARY_PATH=DIR`.

fn main() {
    println!("todo");
}
