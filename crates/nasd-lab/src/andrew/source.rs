//! The source tree the benchmark copies and compiles: a C program shaped like the Andrew
//! benchmark's (Howard88: about 70 files, about 200 KB, a few directories of `.c` and `.h`
//! files and a Makefile), generated from a seed so every run and every target sees the same
//! bytes.
//!
//! Five packages (`util`, `core`, `io`, `net`, `app`) of [`MODULES_PER_PACKAGE`] modules
//! each. A module is a `.c` file with a table of 64 constants and [`FUNCTIONS_PER_MODULE`]
//! functions; each function mixes its argument through the table and adds the result of one
//! function of an earlier module (chosen by the seed), so the call graph crosses packages
//! and headers and every translation unit links against others. `main.c` calls every
//! function once and prints one checksum line, which [`Tree::expected_output`] computes here
//! with the same arithmetic (`uint32_t`, wrapping), so a build that ran proves the compiler
//! read every byte it was given.
//!
//! ```text
//! Makefile  README
//! include/common.h  include/PKG.h (one per package)
//! src/PKG/mNN.c (modules)  src/app/main.c
//! ```

use std::fmt::Write as _;

/// The packages, each a directory under `src/` and a header under `include/`.
pub const PACKAGES: [&str; 5] = ["util", "core", "io", "net", "app"];
/// Modules (`.c` files) per package: 5 x 12 = 60 modules, 70 files with the headers,
/// `main.c`, the Makefile and the README: 69 files (Howard88's tree had about 70).
pub const MODULES_PER_PACKAGE: usize = 12;
/// Functions per module.
pub const FUNCTIONS_PER_MODULE: usize = 4;
/// Entries of each module's table (a power of two: indices are masked).
const TABLE_ENTRIES: usize = 64;
/// Mixing rounds per function.
const ROUNDS: u32 = 12;
/// The program `make` builds (in the tree's root).
pub const PROGRAM: &str = "andrew";

/// One function: what it computes, so the expected output can be worked out here.
#[derive(Clone, Copy, Debug)]
struct Function {
    /// Constant XORed into the argument.
    salt: u32,
    /// Right shift of the mixing step, 1..=31.
    shift: u32,
    /// Odd multiplier of the mixing step.
    mul: u32,
    /// The function called at the end: (module, function), in an earlier module.
    callee: Option<(usize, usize)>,
}

/// One module: its table and functions.
#[derive(Clone, Debug)]
struct Module {
    package: usize,
    /// Index within the package.
    index: usize,
    table: [u32; TABLE_ENTRIES],
    functions: [Function; FUNCTIONS_PER_MODULE],
}

impl Module {
    fn name(&self) -> String {
        format!("m{:02}", self.index)
    }

    fn function_name(&self, j: usize) -> String {
        format!("{}_{}_f{j}", PACKAGES[self.package], self.name())
    }

    fn path(&self) -> String {
        format!("src/{}/{}.c", PACKAGES[self.package], self.name())
    }

    fn object(&self) -> String {
        format!("src/{}/{}.o", PACKAGES[self.package], self.name())
    }
}

/// The generated tree: directories (parents first) and files (relative paths, bytes).
#[derive(Clone, Debug)]
pub struct Tree {
    /// Relative directories, each after its parent.
    pub dirs: Vec<String>,
    /// Relative file paths and contents, in a fixed order.
    pub files: Vec<(String, Vec<u8>)>,
    modules: Vec<Module>,
}

/// SplitMix64: a tiny generator whose stream is fixed by its definition (not by a crate's
/// version), so a seed names the same tree forever.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn u32(&mut self) -> u32 {
        (self.next() >> 32) as u32
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

impl Tree {
    /// The tree of `seed`.
    pub fn generate(seed: u64) -> Tree {
        let mut rng = SplitMix(seed ^ 0x616e_6472_6577);
        let mut modules: Vec<Module> = vec![];
        for package in 0..PACKAGES.len() {
            for index in 0..MODULES_PER_PACKAGE {
                let earlier = modules.len();
                let mut table = [0u32; TABLE_ENTRIES];
                for t in &mut table {
                    *t = rng.u32();
                }
                let functions = std::array::from_fn(|_| Function {
                    salt: rng.u32(),
                    shift: 1 + rng.below(31) as u32,
                    mul: rng.u32() | 1,
                    callee: (earlier > 0)
                        .then(|| (rng.below(earlier), rng.below(FUNCTIONS_PER_MODULE))),
                });
                modules.push(Module {
                    package,
                    index,
                    table,
                    functions,
                });
            }
        }
        let mut dirs = vec!["include".to_string(), "src".to_string()];
        dirs.extend(PACKAGES.iter().map(|p| format!("src/{p}")));
        let mut files = vec![
            ("Makefile".to_string(), makefile(&modules).into_bytes()),
            ("README".to_string(), readme(seed).into_bytes()),
            ("include/common.h".to_string(), common_h().into_bytes()),
        ];
        for (p, name) in PACKAGES.iter().enumerate() {
            let h = package_h(&modules, p);
            files.push((format!("include/{name}.h"), h.into_bytes()));
        }
        for m in &modules {
            files.push((m.path(), module_c(&modules, m).into_bytes()));
        }
        files.push(("src/app/main.c".to_string(), main_c(&modules).into_bytes()));
        Tree {
            dirs,
            files,
            modules,
        }
    }

    /// Bytes of all files together.
    pub fn bytes(&self) -> u64 {
        self.files.iter().map(|(_, d)| d.len() as u64).sum()
    }

    /// What the built program prints.
    pub fn expected_output(&self) -> String {
        let mut sum: u32 = 0;
        let mut calls = 0u32;
        for m in 0..self.modules.len() {
            for j in 0..FUNCTIONS_PER_MODULE {
                let arg = (m * FUNCTIONS_PER_MODULE + j) as u32;
                sum = sum.wrapping_mul(31).wrapping_add(self.call(m, j, arg));
                calls += 1;
            }
        }
        format!("andrew {calls} functions checksum {sum:08x}\n")
    }

    /// The digest of the tree's contents as [`contents_digest`] computes it.
    pub fn digest(&self) -> String {
        contents_digest(self.files.iter().map(|(p, d)| (p.as_str(), d.as_slice())))
    }

    /// Function `j` of module `m` applied to `x`, as the C code computes it.
    fn call(&self, m: usize, j: usize, x: u32) -> u32 {
        let module = &self.modules[m];
        let f = module.functions[j];
        let mut acc = x ^ f.salt;
        for k in 0..ROUNDS {
            let t = module.table[(acc.wrapping_add(k) & (TABLE_ENTRIES as u32 - 1)) as usize];
            acc = (acc ^ (acc >> f.shift)).wrapping_mul(f.mul).wrapping_add(t);
        }
        match f.callee {
            Some((cm, cj)) => acc.wrapping_add(self.call(cm, cj, acc & 0xff)),
            None => acc,
        }
    }
}

/// One digest over a set of files: BLAKE3 over, in path order, each path's length and bytes
/// and each content's length and bytes (little-endian u64 lengths), as hex.
pub fn contents_digest<'a>(files: impl Iterator<Item = (&'a str, &'a [u8])>) -> String {
    let mut v: Vec<(&str, &[u8])> = files.collect();
    v.sort_by(|a, b| a.0.cmp(b.0));
    let mut h = blake3::Hasher::new();
    for (p, d) in v {
        h.update(&(p.len() as u64).to_le_bytes());
        h.update(p.as_bytes());
        h.update(&(d.len() as u64).to_le_bytes());
        h.update(d);
    }
    h.finalize().to_hex().to_string()
}

fn readme(seed: u64) -> String {
    format!(
        "A generated C program for nasd's Andrew-style benchmark (nasd lab andrew), seed {seed}.\n\
         \n\
         {} packages of {MODULES_PER_PACKAGE} modules under src/, one header per package under\n\
         include/. Build with `make`; run ./{PROGRAM}: it calls every function once and prints a\n\
         checksum that the benchmark knows in advance.\n",
        PACKAGES.len()
    )
}

fn common_h() -> String {
    format!(
        "/* common.h: types and constants shared by every module. Generated. */\n\
         #ifndef ANDREW_COMMON_H\n\
         #define ANDREW_COMMON_H\n\
         \n\
         #include <stdint.h>\n\
         \n\
         /* Rounds of the mixing step in every function. */\n\
         #define ANDREW_ROUNDS {ROUNDS}u\n\
         /* Entries of every module's table (a power of two). */\n\
         #define ANDREW_TABLE_MASK {}u\n\
         \n\
         #endif\n",
        TABLE_ENTRIES - 1
    )
}

fn package_h(modules: &[Module], p: usize) -> String {
    let name = PACKAGES[p];
    let guard = format!("ANDREW_{}_H", name.to_uppercase());
    let mut s = format!(
        "/* {name}.h: the functions of package {name}. Generated. */\n\
         #ifndef {guard}\n#define {guard}\n\n#include \"common.h\"\n\n"
    );
    for m in modules.iter().filter(|m| m.package == p) {
        let _ = writeln!(s, "/* {} */", m.path());
        for j in 0..FUNCTIONS_PER_MODULE {
            let _ = writeln!(s, "uint32_t {}(uint32_t x);", m.function_name(j));
        }
    }
    s.push_str("\n#endif\n");
    s
}

fn module_c(modules: &[Module], m: &Module) -> String {
    let mut s = format!(
        "/*\n * {}: module {} of package {}. Generated.\n *\n * Each function mixes its\n\
         * argument through this module's table for ANDREW_ROUNDS rounds and adds what one\n\
         * function of an earlier module makes of the low byte of the result.\n */\n\n\
         #include \"common.h\"\n",
        m.path(),
        m.index,
        PACKAGES[m.package]
    );
    let mut headers: Vec<usize> = vec![m.package];
    for f in &m.functions {
        if let Some((cm, _)) = f.callee {
            headers.push(modules[cm].package);
        }
    }
    headers.sort_unstable();
    headers.dedup();
    for p in headers {
        let _ = writeln!(s, "#include \"{}.h\"", PACKAGES[p]);
    }
    let _ = write!(s, "\nstatic const uint32_t table[{TABLE_ENTRIES}] = {{");
    for (i, t) in m.table.iter().enumerate() {
        if i % 6 == 0 {
            s.push_str("\n\t");
        } else {
            s.push(' ');
        }
        let _ = write!(s, "0x{t:08x}u,");
    }
    s.push_str("\n};\n");
    for (j, f) in m.functions.iter().enumerate() {
        let call = match f.callee {
            Some((cm, cj)) => format!("acc + {}(acc & 0xffu)", modules[cm].function_name(cj)),
            None => "acc".to_string(),
        };
        let _ = write!(
            s,
            "\n/*\n * {name}: salt 0x{salt:08x}, shift {shift}, multiplier 0x{mul:08x}.\n */\n\
             uint32_t {name}(uint32_t x)\n{{\n\
             \tuint32_t acc = x ^ 0x{salt:08x}u;\n\
             \tuint32_t k;\n\
             \n\
             \tfor (k = 0; k < ANDREW_ROUNDS; k++) {{\n\
             \t\tuint32_t t = table[(acc + k) & ANDREW_TABLE_MASK];\n\
             \n\
             \t\tacc = (acc ^ (acc >> {shift})) * 0x{mul:08x}u + t;\n\
             \t}}\n\
             \treturn {call};\n}}\n",
            name = m.function_name(j),
            salt = f.salt,
            shift = f.shift,
            mul = f.mul,
        );
    }
    s
}

fn main_c(modules: &[Module]) -> String {
    let mut s = String::from(
        "/* main.c: calls every function once and prints a checksum. Generated. */\n\n\
         #include <stdio.h>\n",
    );
    for p in PACKAGES {
        let _ = writeln!(s, "#include \"{p}.h\"");
    }
    s.push_str("\nint main(void)\n{\n\tuint32_t sum = 0;\n\tuint32_t calls = 0;\n\n");
    for (i, m) in modules.iter().enumerate() {
        for j in 0..FUNCTIONS_PER_MODULE {
            let arg = i * FUNCTIONS_PER_MODULE + j;
            let _ = writeln!(
                s,
                "\tsum = sum * 31u + {}({arg}u);\n\tcalls++;",
                m.function_name(j)
            );
        }
    }
    s.push_str(
        "\n\tprintf(\"andrew %u functions checksum %08x\\n\", (unsigned)calls, (unsigned)sum);\n\
         \treturn 0;\n}\n",
    );
    s
}

fn makefile(modules: &[Module]) -> String {
    let mut s = String::from(
        "# Makefile of the Andrew-style benchmark's program. Generated.\n\n\
         CC = gcc\nCFLAGS = -O1 -pipe -Iinclude\n\nOBJS =",
    );
    for m in modules {
        let _ = write!(s, " \\\n\t{}", m.object());
    }
    s.push_str(" \\\n\tsrc/app/main.o\n\n");
    let _ = write!(s, "{PROGRAM}: $(OBJS)\n\t$(CC) -o $@ $(OBJS)\n\n");
    for m in modules {
        let mut deps = vec![format!("include/{}.h", PACKAGES[m.package])];
        for f in &m.functions {
            if let Some((cm, _)) = f.callee {
                deps.push(format!("include/{}.h", PACKAGES[modules[cm].package]));
            }
        }
        deps.sort();
        deps.dedup();
        let _ = write!(
            s,
            "{}: {} include/common.h {}\n\t$(CC) $(CFLAGS) -c -o $@ {}\n\n",
            m.object(),
            m.path(),
            deps.join(" "),
            m.path()
        );
    }
    let headers: Vec<String> = PACKAGES.iter().map(|p| format!("include/{p}.h")).collect();
    let _ = write!(
        s,
        "src/app/main.o: src/app/main.c include/common.h {}\n\t$(CC) $(CFLAGS) -c -o $@ src/app/main.c\n\n\
         clean:\n\trm -f $(OBJS) {PROGRAM}\n",
        headers.join(" ")
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tree_has_the_andrew_shape_and_is_fixed_by_its_seed() {
        let t = Tree::generate(1);
        assert_eq!(t.files.len(), 69);
        let kb = t.bytes() / 1000;
        assert!((150..=260).contains(&kb), "{kb} KB");
        assert_eq!(t.dirs.len(), 2 + PACKAGES.len());
        assert_eq!(t.digest(), Tree::generate(1).digest());
        assert_ne!(t.digest(), Tree::generate(2).digest());
        assert!(t
            .expected_output()
            .starts_with("andrew 240 functions checksum "));
        // Every file is in a listed directory (or the root), every directory after its parent.
        for (p, _) in &t.files {
            let parent = p.rsplit_once('/').map(|(d, _)| d);
            assert!(parent.is_none_or(|d| t.dirs.iter().any(|x| x == d)), "{p}");
        }
        for (i, d) in t.dirs.iter().enumerate() {
            if let Some((parent, _)) = d.rsplit_once('/') {
                assert!(t.dirs[..i].iter().any(|x| x == parent), "{d}");
            }
        }
    }

    #[test]
    fn the_digest_does_not_depend_on_order_and_sees_every_byte() {
        let a = contents_digest([("a", &b"1"[..]), ("b", &b"2"[..])].into_iter());
        let b = contents_digest([("b", &b"2"[..]), ("a", &b"1"[..])].into_iter());
        assert_eq!(a, b);
        let c = contents_digest([("a", &b"1"[..]), ("b", &b"3"[..])].into_iter());
        assert_ne!(a, c);
        let d = contents_digest([("a1", &b""[..]), ("b", &b"2"[..])].into_iter());
        assert_ne!(a, d);
    }
}
