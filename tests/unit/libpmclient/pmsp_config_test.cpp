// SPDX-License-Identifier: Apache-2.0
// Which PMSP to ask: SDP_PMSP, then pmclient.yaml, then ApIPAddr:3935.
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "libpmclient/src/pmsp_config.hpp"
#include "test_util.hpp"

namespace pmclient::test {
namespace {

class PmspConfigTest : public ::testing::Test {
  protected:
    void SetUp() override {
        unsetenv("SDP_PMSP");
        dir = std::filesystem::temp_directory_path() /
              ("pmclient-cfg-" + std::to_string(::getpid()) + "-" +
               ::testing::UnitTest::GetInstance()->current_test_info()->name());
        std::filesystem::create_directories(dir);
        path = (dir / "pmclient.yaml").string();
        setenv("SDP_PMCLIENT_CONFIG", path.c_str(), 1);
    }
    void TearDown() override {
        unsetenv("SDP_PMSP");
        unsetenv("SDP_PMCLIENT_CONFIG");
        std::filesystem::remove_all(dir);
    }
    void write(const std::string& text) { std::ofstream(path) << text; }

    std::filesystem::path dir;
    std::string path;
};

TEST_F(PmspConfigTest, ParsePmsp) {
    EXPECT_EQ(parse_pmsp("1.2.3.4:3935"), ep("1.2.3.4:3935"));
    EXPECT_EQ(parse_pmsp("[::1]:4000"), ep("[::1]:4000"));
    EXPECT_EQ(parse_pmsp("1.2.3.4"), ep("1.2.3.4:3935"));
    EXPECT_EQ(parse_pmsp("::1"), ep("[::1]:3935"));
    EXPECT_FALSE(parse_pmsp("1.2.3.4:0"));
    EXPECT_FALSE(parse_pmsp("0.0.0.0:3935"));
    EXPECT_FALSE(parse_pmsp("host.example:3935"));
    EXPECT_FALSE(parse_pmsp("1.2.3.4:65536"));
    EXPECT_FALSE(parse_pmsp(""));
}

TEST_F(PmspConfigTest, MissingFileMeansDefault) {
    auto s = load_pmsp_setting();
    ASSERT_TRUE(std::holds_alternative<PmspSetting>(s));
    EXPECT_FALSE(std::get<PmspSetting>(s).endpoint);
    EXPECT_EQ(std::get<PmspSetting>(s).source, "default");
}

TEST_F(PmspConfigTest, FileGivesPmsp) {
    write("# client config\npmsp: \"127.0.0.1:4935\"\nother: ignored\n");
    auto s = load_pmsp_setting();
    ASSERT_TRUE(std::holds_alternative<PmspSetting>(s));
    EXPECT_EQ(std::get<PmspSetting>(s).endpoint, ep("127.0.0.1:4935"));
    EXPECT_EQ(std::get<PmspSetting>(s).source, path);
}

TEST_F(PmspConfigTest, EnvironmentBeatsFile) {
    write("pmsp: 127.0.0.1:4935\n");
    setenv("SDP_PMSP", "[::1]:5935", 1);
    auto s = load_pmsp_setting();
    ASSERT_TRUE(std::holds_alternative<PmspSetting>(s));
    EXPECT_EQ(std::get<PmspSetting>(s).endpoint, ep("[::1]:5935"));
    EXPECT_EQ(std::get<PmspSetting>(s).source, "SDP_PMSP");
}

TEST_F(PmspConfigTest, BadEnvironmentIsAnError) {
    setenv("SDP_PMSP", "nonsense", 1);
    auto s = load_pmsp_setting();
    ASSERT_TRUE(std::holds_alternative<std::string>(s));
    EXPECT_NE(std::get<std::string>(s).find("SDP_PMSP"), std::string::npos);
}

TEST_F(PmspConfigTest, BadFileIsAnErrorNamingFileAndLine) {
    write("\npmsp: 1.2.3.4:0\n");
    auto s = load_pmsp_setting();
    ASSERT_TRUE(std::holds_alternative<std::string>(s));
    EXPECT_NE(std::get<std::string>(s).find(path + ":2"), std::string::npos)
        << std::get<std::string>(s);
    write("pmsp: [unclosed\n");
    EXPECT_TRUE(std::holds_alternative<std::string>(load_pmsp_setting()));
    write("- a\n- b\n");
    EXPECT_TRUE(std::holds_alternative<std::string>(load_pmsp_setting()));
    write("pmsp: {a: 1}\n");
    EXPECT_TRUE(std::holds_alternative<std::string>(load_pmsp_setting()));
}

TEST_F(PmspConfigTest, EmptyFileOrNoKeyMeansDefault) {
    write("");
    auto s = load_pmsp_setting();
    ASSERT_TRUE(std::holds_alternative<PmspSetting>(s));
    EXPECT_FALSE(std::get<PmspSetting>(s).endpoint);
    write("pmsp:\n");
    s = load_pmsp_setting();
    ASSERT_TRUE(std::holds_alternative<PmspSetting>(s));
    EXPECT_FALSE(std::get<PmspSetting>(s).endpoint);
}

TEST_F(PmspConfigTest, ParsePmspList) {
    std::string why;
    EXPECT_EQ(parse_pmsp_list("10.0.0.1:3935,10.0.0.2, [fd00::1]:4000", why),
              (std::vector<pm::Endpoint>{ep("10.0.0.1:3935"), ep("10.0.0.2:3935"),
                                         ep("[fd00::1]:4000")}));
    EXPECT_TRUE(why.empty()) << why;
    EXPECT_EQ(parse_pmsp_list("1.2.3.4", why), (std::vector<pm::Endpoint>{ep("1.2.3.4:3935")}));

    auto bad = [](const char* text) {
        std::string w;
        auto l = parse_pmsp_list(text, w);
        EXPECT_TRUE(l.empty()) << text;
        return w;
    };
    EXPECT_NE(bad("10.0.0.1,nonsense:1").find("'nonsense:1'"), std::string::npos);
    EXPECT_NE(bad("10.0.0.1,10.0.0.2:0").find("'10.0.0.2:0'"), std::string::npos);
    EXPECT_NE(bad("10.0.0.1,,10.0.0.2").find("entry 2 is empty"), std::string::npos);
    EXPECT_NE(bad("10.0.0.1,").find("entry 2 is empty"), std::string::npos);
    EXPECT_NE(bad("").find("empty"), std::string::npos);
    EXPECT_NE(bad("10.0.0.1,10.0.0.1:3935").find("twice"), std::string::npos);
    std::string many;
    for (int i = 1; i <= 16; ++i) {
        many += (i > 1 ? "," : "") + std::string("10.1.0.") + std::to_string(i);
    }
    EXPECT_EQ(parse_pmsp_list(many, why).size(), 16u);
    EXPECT_NE(bad((many + ",10.1.0.17").c_str()).find("more than 16"), std::string::npos);
}

TEST_F(PmspConfigTest, EnvironmentList) {
    setenv("SDP_PMSP", "10.0.0.1:3935,10.0.0.2,[fd00::1]:3935", 1);
    auto s = load_pmsp_setting();
    ASSERT_TRUE(std::holds_alternative<PmspSetting>(s));
    const auto& set = std::get<PmspSetting>(s);
    EXPECT_EQ(set.endpoints, (std::vector<pm::Endpoint>{ep("10.0.0.1:3935"), ep("10.0.0.2:3935"),
                                                        ep("[fd00::1]:3935")}));
    EXPECT_EQ(set.endpoint, ep("10.0.0.1:3935"));
    EXPECT_EQ(set.source, "SDP_PMSP");

    setenv("SDP_PMSP", "10.0.0.1:3935,bogus", 1);
    s = load_pmsp_setting();
    ASSERT_TRUE(std::holds_alternative<std::string>(s));
    EXPECT_NE(std::get<std::string>(s).find("SDP_PMSP"), std::string::npos);
    EXPECT_NE(std::get<std::string>(s).find("'bogus'"), std::string::npos)
        << std::get<std::string>(s);
}

TEST_F(PmspConfigTest, FileScalarListAndSequence) {
    write("pmsp: \"127.0.0.1:4935, 127.0.0.2\"\n");
    auto s = load_pmsp_setting();
    ASSERT_TRUE(std::holds_alternative<PmspSetting>(s));
    EXPECT_EQ(std::get<PmspSetting>(s).endpoints,
              (std::vector<pm::Endpoint>{ep("127.0.0.1:4935"), ep("127.0.0.2:3935")}));

    write("pmsp:\n  - 127.0.0.1:4935\n  - \"[::1]:4935\"\n  - 127.0.0.3\n");
    s = load_pmsp_setting();
    ASSERT_TRUE(std::holds_alternative<PmspSetting>(s));
    EXPECT_EQ(
        std::get<PmspSetting>(s).endpoints,
        (std::vector<pm::Endpoint>{ep("127.0.0.1:4935"), ep("[::1]:4935"), ep("127.0.0.3:3935")}));
    EXPECT_EQ(std::get<PmspSetting>(s).endpoint, ep("127.0.0.1:4935"));
    EXPECT_EQ(std::get<PmspSetting>(s).source, path);
}

TEST_F(PmspConfigTest, FileSequenceErrorsNameTheEntryAndLine) {
    write("pmsp:\n  - 127.0.0.1:4935\n  - 127.0.0.2:0\n");
    auto s = load_pmsp_setting();
    ASSERT_TRUE(std::holds_alternative<std::string>(s));
    EXPECT_NE(std::get<std::string>(s).find(path + ":3"), std::string::npos)
        << std::get<std::string>(s);
    EXPECT_NE(std::get<std::string>(s).find("'127.0.0.2:0'"), std::string::npos);

    write("pmsp: []\n");
    EXPECT_TRUE(std::holds_alternative<std::string>(load_pmsp_setting()));
    write("pmsp:\n  - [1, 2]\n");
    EXPECT_TRUE(std::holds_alternative<std::string>(load_pmsp_setting()));
    write("pmsp:\n  - 127.0.0.1\n  - 127.0.0.1:3935\n");
    s = load_pmsp_setting();
    ASSERT_TRUE(std::holds_alternative<std::string>(s));
    EXPECT_NE(std::get<std::string>(s).find("twice"), std::string::npos);
    std::string many = "pmsp:\n";
    for (int i = 1; i <= 17; ++i) {
        many += "  - 10.1.0." + std::to_string(i) + "\n";
    }
    write(many);
    s = load_pmsp_setting();
    ASSERT_TRUE(std::holds_alternative<std::string>(s));
    EXPECT_NE(std::get<std::string>(s).find("16"), std::string::npos);
}

}  // namespace
}  // namespace pmclient::test
