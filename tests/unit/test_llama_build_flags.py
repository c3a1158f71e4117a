"""make install's llama.cpp build: the widest SIMD the CPU has, never AMX."""

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "llama_build_flags.py"
spec = importlib.util.spec_from_file_location("llama_build_flags", SCRIPT)
flags_script = importlib.util.module_from_spec(spec)
spec.loader.exec_module(flags_script)

AVX2 = "fpu sse sse2 ssse3 sse4_1 sse4_2 avx f16c fma bmi1 bmi2 avx2"
# As the kernel spells them: "avx512vbmi" without an underscore, "avx512_vnni" with one.
SAPPHIRE_RAPIDS = (
    AVX2 + " avx512f avx512dq avx512cd avx512bw avx512vl avx512_vnni avx512_bf16 avx512vbmi"
    " avx512_vbmi2 amx_tile amx_int8 amx_bf16 avx_vnni"
)
# /proc/cpuinfo's flags line of a 2-core development VM (AMD EPYC, Zen 4 class), verbatim.
EPYC_VM = (
    "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse"
    " sse2 ht syscall nx mmxext fxsr_opt pdpe1gb rdtscp lm constant_tsc rep_good nopl xtopology"
    " nonstop_tsc cpuid extd_apicid tsc_known_freq pni pclmulqdq ssse3 fma cx16 pcid sse4_1"
    " sse4_2 x2apic movbe popcnt tsc_deadline_timer aes xsave avx f16c rdrand hypervisor lahf_lm"
    " cmp_legacy cr8_legacy abm sse4a misalignsse 3dnowprefetch osvw topoext vmmcall fsgsbase"
    " tsc_adjust bmi1 avx2 smep bmi2 erms invpcid avx512f avx512dq adx smap avx512ifma"
    " clflushopt clwb avx512cd sha_ni avx512bw avx512vl xsaveopt xsavec xgetbv1 xsaves avx_vnni"
    " avx512_bf16 clzero xsaveerptr arat avx512vbmi umip avx512_vbmi2 gfni vaes vpclmulqdq"
    " avx512_vnni avx512_bitalg avx512_vpopcntdq rdpid fsrm avx512_vp2intersect"
)
SKYLAKE_SERVER = AVX2 + " avx512f avx512dq avx512cd avx512bw avx512vl"


def build(flags, machine="x86_64"):
    key, options = flags_script.build(set(flags.split()), machine)
    return key, dict(option.removeprefix("-D").split("=") for option in options)


def test_a_cpu_with_avx512_vnni_and_bf16_gets_them_all_and_never_amx():
    key, options = build(SAPPHIRE_RAPIDS)
    assert key == "avx512-vnni-vbmi-bf16"
    assert options["GGML_NATIVE"] == "OFF"
    assert options["GGML_AVX512"] == options["GGML_AVX512_VNNI"] == "ON"
    assert options["GGML_AVX512_BF16"] == options["GGML_AVX512_VBMI"] == "ON"
    assert options["GGML_AMX_TILE"] == options["GGML_AMX_INT8"] == options["GGML_AMX_BF16"] == "OFF"


def test_a_real_cpuinfo_line_with_vbmi_switches_it_on():
    key, options = build(EPYC_VM)
    assert key == "avx512-vnni-vbmi-bf16"
    assert options["GGML_AVX512_VBMI"] == options["GGML_AVX512_VNNI"] == "ON"


def test_avx512_without_its_extensions_builds_without_them():
    key, options = build(SKYLAKE_SERVER)
    assert key == "avx512"
    assert options["GGML_AVX512"] == "ON" and options["GGML_AVX512_VNNI"] == "OFF"


def test_a_cpu_without_avx512_gets_the_avx2_build():
    key, options = build(AVX2)
    assert key == "avx2"
    assert options["GGML_AVX2"] == options["GGML_FMA"] == options["GGML_F16C"] == "ON"
    assert options["GGML_AVX512"] == "OFF"


def test_an_older_cpu_or_another_architecture_gets_no_simd_it_lacks():
    assert build("fpu sse sse2 sse4_2")[0] == "sse42"
    assert build("fpu sse sse2 sse4_2")[1]["GGML_AVX"] == "OFF"
    assert build("", "aarch64") == ("aarch64", build("", "aarch64")[1])
    assert "GGML_AVX2" not in build("", "aarch64")[1]


def test_the_flags_come_from_the_cpuinfo_flags_line():
    text = "processor: 0\nflags\t\t: fpu avx2 avx512f\nbugs: none\n"
    assert flags_script.cpu_flags(text) == {"fpu", "avx2", "avx512f"}
