import streamlit as st

st.title("overhead")
st.info("coming")
